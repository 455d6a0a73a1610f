// Package ipsettest holds Fake, an in-memory ipset.Kernel with failure
// injection, for tests that need no root.
package ipsettest
