package data

import (
	"bytes"
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/distflow/distflow/tensor"
)

//go:generate go run ./embedded/gen.go -src /usr/share/datasets/fashion-mnist -out embedded

// The subset of Fashion-MNIST shipped in the binary (see embedded/NOTICE).
//
//go:embed embedded/*.gz
var embeddedFS embed.FS

// DefaultFashionMNISTDir is where Debian's dataset-fashion-mnist package
// installs the data set.
const DefaultFashionMNISTDir = "/usr/share/datasets/fashion-mnist"

// DataEnv is the environment variable that Locate consults after the flag.
const DataEnv = "DISTFLOW_DATA"

// ImageSize is the number of pixels of a Fashion-MNIST image (28x28).
const ImageSize = 28 * 28

// NumClasses is the number of Fashion-MNIST classes.
const NumClasses = 10

// ClassNames are the Fashion-MNIST class names, indexed by label.
var ClassNames = [NumClasses]string{
	"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
	"Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
}

// Split is one part (training or test) of an image classification data set.
type Split struct {
	Images *tensor.Tensor // float32 [N, 784], pixels scaled to [0, 1]
	Labels *tensor.Tensor // int32 [N], class indices in [0, 10)
}

// Len returns the number of examples.
func (s Split) Len() int {
	if s.Labels == nil {
		return 0
	}
	return s.Labels.Shape()[0]
}

// Dataset returns the split as a Dataset of (image [784], label []) pairs.
// The elements share memory with the split.
func (s Split) Dataset() (*Dataset, error) {
	return FromTensors(s.Images, s.Labels)
}

// The standard file names, without the optional ".gz".
var fashionFiles = [2][2]string{
	{"train-images-idx3-ubyte", "train-labels-idx1-ubyte"},
	{"t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"},
}

// LoadFashionMNIST reads the four standard Fashion-MNIST (or MNIST) files
// from dir: train-images-idx3-ubyte, train-labels-idx1-ubyte,
// t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte, each optionally
// gzip-compressed with a ".gz" suffix. It checks that images are 28x28
// bytes, that images and labels agree in count and that labels are in 0..9.
func LoadFashionMNIST(dir string) (train, test Split, err error) {
	open := func(stem string) (*tensor.Tensor, error) {
		for _, name := range []string{stem + ".gz", stem} {
			p := filepath.Join(dir, name)
			if _, err := os.Stat(p); err == nil {
				return ReadIDXFile(p)
			}
		}
		return nil, fmt.Errorf("data: %s: neither %s.gz nor %s exists", dir, stem, stem)
	}
	return loadSplits(open)
}

// Embedded returns the Fashion-MNIST subset compiled into the binary: the
// first 8000 training images and the first 2000 test images (about 800 and
// 200 per class). It is the fallback when the full data set is not
// installed; see embedded/NOTICE for its origin and licence.
func Embedded() (train, test Split, err error) {
	open := func(stem string) (*tensor.Tensor, error) {
		name := "embedded/" + stem + ".gz"
		b, err := fs.ReadFile(embeddedFS, name)
		if err != nil {
			return nil, fmt.Errorf("data: embedded Fashion-MNIST: %w", err)
		}
		return readIDX(bytes.NewReader(b), name)
	}
	return loadSplits(open)
}

func loadSplits(open func(stem string) (*tensor.Tensor, error)) (train, test Split, err error) {
	var splits [2]Split
	for i, files := range fashionFiles {
		images, err := open(files[0])
		if err != nil {
			return Split{}, Split{}, err
		}
		labels, err := open(files[1])
		if err != nil {
			return Split{}, Split{}, err
		}
		if splits[i], err = makeSplit(images, labels, files); err != nil {
			return Split{}, Split{}, err
		}
	}
	return splits[0], splits[1], nil
}

// makeSplit validates raw IDX images (uint8 [N,28,28] or [N,784]) and labels
// (uint8 [N]) and converts them to the Split representation.
func makeSplit(images, labels *tensor.Tensor, files [2]string) (Split, error) {
	is, ls := images.Shape(), labels.Shape()
	if images.DType() != tensor.Uint8 || len(is) < 2 || tensor.NumElements(is[1:]) != ImageSize {
		return Split{}, fmt.Errorf("data: %s: got %v %v, want uint8 images of %d pixels ([N,28,28])",
			files[0], images.DType(), images.StaticShape(), ImageSize)
	}
	if labels.DType() != tensor.Uint8 || len(ls) != 1 {
		return Split{}, fmt.Errorf("data: %s: got %v %v, want uint8 labels [N]",
			files[1], labels.DType(), labels.StaticShape())
	}
	if is[0] != ls[0] {
		return Split{}, fmt.Errorf("data: %s has %d images but %s has %d labels", files[0], is[0], files[1], ls[0])
	}
	y := tensor.New(tensor.Int32, ls[0])
	yd := y.Int32s()
	for i, v := range labels.Uint8s() {
		if v >= NumClasses {
			return Split{}, fmt.Errorf("data: %s: label %d of example %d is outside 0..%d", files[1], v, i, NumClasses-1)
		}
		yd[i] = int32(v)
	}
	var scale [256]float32
	for i := range scale {
		scale[i] = float32(i) / 255
	}
	x := tensor.New(tensor.Float32, is[0], ImageSize)
	xd := x.Float32s()
	for i, v := range images.Uint8s() {
		xd[i] = scale[v]
	}
	return Split{Images: x, Labels: y}, nil
}

// EmbeddedName is the --data value, and the Load source, of the embedded subset.
const EmbeddedName = "embedded"

// Locate chooses where the Fashion-MNIST data comes from, in this order:
// flagDir if it is not empty (typically a --data flag); else $DISTFLOW_DATA
// if set; else DefaultFashionMNISTDir if that directory exists; else the
// embedded subset, reported as embedded = true with an empty dir. The
// flag value "embedded" asks for the embedded subset explicitly.
func Locate(flagDir string) (dir string, embedded bool) {
	if flagDir == EmbeddedName {
		return "", true
	}
	if flagDir != "" {
		return flagDir, false
	}
	if env := os.Getenv(DataEnv); env != "" {
		return env, false
	}
	if fi, err := os.Stat(DefaultFashionMNISTDir); err == nil && fi.IsDir() {
		return DefaultFashionMNISTDir, false
	}
	return "", true
}

// Load loads Fashion-MNIST from where Locate(flagDir) says, and returns that
// place ("embedded" for the embedded subset) for the logs.
func Load(flagDir string) (train, test Split, from string, err error) {
	dir, embedded := Locate(flagDir)
	if embedded {
		train, test, err = Embedded()
		return train, test, EmbeddedName, err
	}
	train, test, err = LoadFashionMNIST(dir)
	return train, test, dir, err
}
