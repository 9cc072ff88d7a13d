//go:build !race

package train_test

// sparseRace: the race detector is off (see sparse_race_test.go).
const sparseRace = false
