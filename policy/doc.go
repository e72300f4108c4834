// Package policy is the decision core of the permission policy (DESIGN
// §6): it compiles the rules of the org and user layers (ParseFile,
// ParseLayer, Merge, AddInclude, Compile), decides a request
// (Policy.Decide: the rules evaluated over the evidence policy/extract
// reads from the request; deny > ask > allow, rule order never matters),
// explains a decision (Explain) and runs a policy's own tests (RunTests).
// It is pure: no I/O, no goroutines, no logs. `go doc policy.Policy` has
// the semantics, `go doc policy.Layer` the schema, and `go doc
// policy/extract` how a request is read.
package policy
