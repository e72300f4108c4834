package router

import (
	"encoding/json"
	"fmt"

	"github.com/acp-router/acp-router/upstream"
)

// confineTerminal rewrites the params of a terminal/create that the editor
// is to run for inst, whose process runs under a sandbox plan, so that the
// command runs under the same plan (issue 29 point 2): the editor runs
// the router's executable as the sandbox's terminal helper, which execs
// the original command confined (sandbox.Plan.Terminal). The policy has
// decided on, and the audit recorded, the original command already. Params
// of an unconfined agent are returned unchanged; a command that cannot be
// confined is refused, never run unconfined.
func confineTerminal(inst *upstream.Instance, p json.RawMessage) (json.RawMessage, error) {
	plan := inst.Plan()
	if plan == nil {
		return p, nil
	}
	var fields map[string]json.RawMessage
	var command string
	var args []string
	if json.Unmarshal(p, &fields) != nil || json.Unmarshal(fields["command"], &command) != nil || command == "" ||
		fields["args"] != nil && json.Unmarshal(fields["args"], &args) != nil {
		return nil, fail(errParams, "acp-router: terminal/create needs a command (a string) and args (strings)", nil)
	}
	exe, wrapped, err := plan.Terminal(command, args)
	if err != nil {
		return nil, fail(errInternal, fmt.Sprintf("acp-router: agent %q runs in a sandbox and its command cannot: %v", inst.Agent.Name(), err), nil)
	}
	fields["command"], _ = json.Marshal(exe)
	fields["args"], _ = json.Marshal(wrapped)
	return json.Marshal(fields)
}
