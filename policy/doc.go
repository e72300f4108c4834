// Package policy is the permission policy's decision core (DESIGN §6):
// ParseFile, ParseLayer, Merge, AddInclude and Compile build it from the
// org and user layers; Policy.Decide evaluates its rules over what
// policy/extract reads (deny > ask > allow, rule order never matters);
// Explain says why; RunTests runs its tests. Pure: no I/O, goroutines or
// logs. Semantics: `go doc policy.Policy`; schema: `go doc policy.Layer`.
package policy
