// Calls a kernel with its arguments unpacked from cuLaunchKernel's
// kernelParams, and runs a launch block by block.
template <class... A, std::size_t... I>
static void call_impl(void (*f)(A...), void** p, std::index_sequence<I...>) {
  f(*static_cast<typename std::remove_cv<typename std::remove_reference<A>::type>::type*>(p[I])...);
}
template <class... A>
static void call(void (*f)(A...), void** p) { call_impl(f, p, std::index_sequence_for<A...>{}); }

// save copies a launch's arguments, as the driver does when it captures a
// launch into a graph.
template <class... A, std::size_t... I>
static void** save_impl(void (*)(A...), void** p, std::index_sequence<I...>) {
  void** out = new void*[sizeof...(A) + 1];
  ((out[I] = new typename std::decay<A>::type(*static_cast<typename std::decay<A>::type*>(p[I]))), ...);
  return out;
}
template <class... A>
static void** save(void (*f)(A...), void** p) { return save_impl(f, p, std::index_sequence_for<A...>{}); }

struct entry {
  const char* name;
  void (*run)(void**);
  void** (*save)(void**);
};
extern const entry emu_kernels[];
extern const int emu_nkernels;

static ucontext_t emu_boot;
static jmp_buf emu_done;
static void (*emu_run)(void**);
static void** emu_params;

// emu_fiber runs thread t of every block in turn, with a barrier between
// blocks, then hands over to the next fiber (the last to the launcher). It
// first records where it starts and returns to the launcher's set-up.
static void emu_fiber(int t) {
  if (!_setjmp(emu_jumps[t])) setcontext(&emu_boot);
  emu_current = t;
  threadIdx = emu_thread(t);
  for (unsigned z = 0; z < gridDim.z; ++z)
    for (unsigned y = 0; y < gridDim.y; ++y)
      for (unsigned x = 0; x < gridDim.x; ++x) {
        blockIdx = dim3{x, y, z};
        emu_run(emu_params);
        __syncthreads();  // the next block reuses shared memory
      }
  if ((unsigned)t + 1 < emu_nthreads) {
    emu_current = t + 1;
    _longjmp(emu_jumps[t + 1], 1);
  }
  _longjmp(emu_done, 1);
}

// emu_run_kernel runs kernel k on the grid and block.
static void emu_run_kernel(int k, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                           void** params) {
  gridDim = dim3{gx, gy, gz};
  blockDim = dim3{bx, by, bz};
  emu_nthreads = bx * by * bz;
  emu_run = emu_kernels[k].run;
  emu_params = params;
  const size_t stack = 64 << 10;
  emu_jumps = new jmp_buf[emu_nthreads];
  char* stacks = (char*)std::malloc(stack * emu_nthreads);
  for (unsigned t = 0; t < emu_nthreads; ++t) {
    ucontext_t fiber;
    getcontext(&fiber);
    fiber.uc_stack.ss_sp = stacks + t * stack;
    fiber.uc_stack.ss_size = stack;
    fiber.uc_link = nullptr;
    makecontext(&fiber, (void (*)())emu_fiber, 1, (int)t);
    swapcontext(&emu_boot, &fiber);  // returns once the fiber has recorded its start
  }
  emu_current = 0;
  if (!_setjmp(emu_done)) _longjmp(emu_jumps[0], 1);
  std::free(stacks);
  delete[] emu_jumps;
}

// emu_find returns the index of the kernel called name, or -1.
static int emu_find(const char* name) {
  for (int k = 0; k < emu_nkernels; ++k) {
    if (std::strcmp(emu_kernels[k].name, name) == 0) return k;
  }
  return -1;
}

extern "C" int emu_launch(const char* name, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                          unsigned bz, void** params) {
  int k = emu_find(name);
  if (k < 0) return 1;
  emu_run_kernel(k, gx, gy, gz, bx, by, bz, params);
  return 0;
}
