package overlay

// Hooks for the tests of package overlay_test: those run the managers on
// the FakeNetlink of overlaytest, a package that imports this one, so they
// cannot be internal tests.

// ParseKernelVersion is parseKernelVersion.
func ParseKernelVersion(release string) (major, minor int, ok bool) {
	return parseKernelVersion(release)
}

// NLFamily is nlFamily.
func NLFamily(ipVersion int) int { return nlFamily(ipVersion) }
