// Package docs holds no code: its test keeps the user documentation
// (README.md, CONTRIBUTING.md, docs/) true to the repository. A link to a
// file that moved, to a heading that was renamed or to a test function
// that no longer exists fails `go test ./internal/docs`, as does a config
// key the configuration page does not mention or a README past its budget.
package docs
