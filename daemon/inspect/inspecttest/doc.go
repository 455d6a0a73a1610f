// Package inspecttest holds Fake, an inspect.Reader over fixed contents,
// for tests that compare without a kernel.
package inspecttest
