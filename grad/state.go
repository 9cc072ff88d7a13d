package grad

// The state and random ops have no gradient.
func init() {
	RegisterNone("LearningRateFactor", "its input is the integer global step")
	for _, op := range []string{"Assign", "AssignAdd", "AssignSub"} {
		RegisterNone(op, "an assignment is a side effect on a variable; differentiate through the value it assigns instead")
	}
	RegisterNone("IsVariableInitialized", "its output is a bool")
	for _, op := range []string{"ApplyGradientDescent", "ApplyMomentum", "ApplyAdagrad", "ApplyRMSProp", "ApplyAdam"} {
		RegisterNone(op, "an optimizer update has no outputs to differentiate")
	}
	for _, op := range []string{"RandomNormal", "TruncatedNormal", "RandomUniform"} {
		RegisterNone(op, "random samples do not depend on the shape input; its elements are integers")
	}
}
