package routes

// KernelType returns the rtm_type the kernel stores a route of type t as
// (RTN_UNICAST for link and gateway routes).
func (t TargetType) KernelType() int { return t.kernelType() }
