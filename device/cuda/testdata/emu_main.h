// Calls a kernel with its arguments unpacked from cuLaunchKernel's
// kernelParams, and runs a launch block by block.
template <class... A, std::size_t... I>
static void call_impl(void (*f)(A...), void** p, std::index_sequence<I...>) {
  f(*static_cast<typename std::remove_cv<typename std::remove_reference<A>::type>::type*>(p[I])...);
}
template <class... A>
static void call(void (*f)(A...), void** p) { call_impl(f, p, std::index_sequence_for<A...>{}); }

struct entry {
  const char* name;
  void (*run)(void**);
};
extern const entry emu_kernels[];
extern const int emu_nkernels;

extern "C" int emu_launch(const char* name, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                          unsigned bz, void** params) {
  for (int k = 0; k < emu_nkernels; ++k) {
    if (std::strcmp(emu_kernels[k].name, name) != 0) continue;
    gridDim = dim3{gx, gy, gz};
    blockDim = dim3{bx, by, bz};
    unsigned nt = bx * by * bz;
    std::barrier<> bar(nt);
    emu_barrier = &bar;
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < nt; ++t) {
      threads.emplace_back([=, &bar] {
        threadIdx = dim3{t % bx, (t / bx) % by, t / (bx * by)};
        for (unsigned z = 0; z < gz; ++z)
          for (unsigned y = 0; y < gy; ++y)
            for (unsigned x = 0; x < gx; ++x) {
              blockIdx = dim3{x, y, z};
              emu_kernels[k].run(params);
              bar.arrive_and_wait();  // the next block reuses shared memory
            }
      });
    }
    for (auto& th : threads) th.join();
    return 0;
  }
  return 1;
}
