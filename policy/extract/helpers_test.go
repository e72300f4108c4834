package extract

// The session of a test request, as policy.TestCwd and policy.TestHome
// (the internal tests cannot import the core, which imports this package).
const (
	testHome = "/home/user"
	testCwd  = "/home/user/project"
)
