//go:build race

package train_test

// sparseRace: the race detector is on; it makes a 10M-row table take
// minutes and gigabytes more, so the tests keep to small tables.
const sparseRace = true
