package grad

// The checkpoint ops have no gradient.
func init() {
	RegisterNone("SaveVariables", "saving is a side effect; its output is a file description")
	RegisterNone("RestoreVariables", "restoring is a side effect on variables and has no outputs")
}
