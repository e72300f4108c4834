package test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// The ACP schema the messages the router writes are checked against: to
// the editor (Editor.receive) and to the fake agents (fakeAgent.dispatch).
// The params of requests and notifications are checked by method, results
// by the method of the request they answer, errors as errors. It is the
// npm SDK's copy of the schema (the newest here, with the unstable methods
// the router also speaks), from the install scripts/test.sh makes for the
// sdk24 peers: no copy of it lives in this repository.
const schemaFile = "node_modules/@agentclientprotocol/sdk/schema/v1/schema.unstable.json"

// schemaPath is where the schema is installed.
func schemaPath() string {
	prefix := os.Getenv("ACP_E2E_SDK24")
	if prefix == "" {
		prefix = filepath.Join(moduleRoot, ".peers", "sdk24")
	}
	return filepath.Join(prefix, filepath.FromSlash(schemaFile))
}

// schemaInstalled reports whether the schema is there to check with.
func schemaInstalled() bool {
	_, err := os.Stat(schemaPath())
	return err == nil
}

// acpSchema compiles the definition for a method and kind when first asked
// (a fake agent checks a handful of methods: compiling all 70 costs a
// fake agent's start 40 ms, far more under -race).
type acpSchema struct {
	c           *jsonschema.Compiler
	defs        map[string]string // "request METHOD", "response METHOD", "notification METHOD" -> definition
	updateKinds map[string]bool   // the session/update kinds the schema defines

	mu       sync.Mutex
	compiled map[string]*jsonschema.Schema

	// dialect and all, when split (readSchema): the schema's $schema and
	// every definition, to cut a document per definition from.
	dialect any
	all     map[string]any
}

const schemaURL = "acp:schema.json"

var (
	schemaOnce sync.Once
	schemaVal  *acpSchema
	schemaErr  error
)

// loadSchema returns the schema, nil when it is not installed outside CI
// (the checks are then skipped; CI always has it).
func loadSchema(t testing.TB) *acpSchema {
	schemaOnce.Do(func() { schemaVal, schemaErr = readSchema(schemaPath(), false) })
	if schemaErr != nil {
		if os.IsNotExist(schemaErr) && os.Getenv("CI") == "" {
			return nil
		}
		t.Fatalf("the ACP schema: %v (scripts/test.sh installs it with the sdk24 peers)", schemaErr)
	}
	return schemaVal
}

// readSchema reads the schema at path and indexes its definitions by the
// method they belong to (x-method). split: each definition is compiled
// from a document of its own that holds only what it refers to (def),
// for a process that checks a few kinds of message (a fake agent: one
// process each, hundreds a run). Compiling the whole 385 KB schema, even
// for one definition, walks and validates all of it: 80 ms of each fake
// agent's start, a fifth of test/'s CPU.
func readSchema(path string, split bool) (*acpSchema, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	s := &acpSchema{c: jsonschema.NewCompiler(), defs: map[string]string{}, updateKinds: map[string]bool{}, compiled: map[string]*jsonschema.Schema{}}
	root, _ := doc.(map[string]any)
	defs, _ := root["$defs"].(map[string]any)
	if split {
		s.dialect, s.all = root["$schema"], defs
	} else if err := s.c.AddResource(schemaURL, doc); err != nil {
		return nil, err
	}
	for name, d := range defs {
		d, _ := d.(map[string]any)
		method, _ := d["x-method"].(string)
		if method == "" {
			continue
		}
		for _, kind := range []string{"Request", "Response", "Notification"} {
			if strings.HasSuffix(name, kind) {
				s.defs[strings.ToLower(kind)+" "+method] = name
			}
		}
	}
	update, _ := defs["SessionUpdate"].(map[string]any)
	variants, _ := update["oneOf"].([]any)
	for _, v := range variants {
		v, _ := v.(map[string]any)
		props, _ := v["properties"].(map[string]any)
		su, _ := props["sessionUpdate"].(map[string]any)
		if k, _ := su["const"].(string); k != "" {
			s.updateKinds[k] = true
		}
	}
	if len(s.updateKinds) < 10 || s.defs["response session/prompt"] == "" {
		return nil, fmt.Errorf("%s: not the ACP schema this test knows (%d update kinds)", path, len(s.updateKinds))
	}
	return s, nil
}

// def returns the compiled definition name, nil when there is none.
func (s *acpSchema) def(name string) *jsonschema.Schema {
	if s == nil || name == "" {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if sch, ok := s.compiled[name]; ok {
		return sch
	}
	url := schemaURL
	if s.all != nil {
		url = "acp:def/" + name
		if err := s.c.AddResource(url, map[string]any{"$schema": s.dialect, "$defs": refClosure(s.all, name)}); err != nil {
			panic(fmt.Sprintf("the ACP schema's %s: %v", name, err))
		}
	}
	sch, err := s.c.Compile(url + "#/$defs/" + name)
	if err != nil {
		panic(fmt.Sprintf("the ACP schema's %s does not compile: %v", name, err))
	}
	s.compiled[name] = sch
	return sch
}

// refClosure is the definitions name refers to, itself included, through
// "$ref": "#/$defs/X" at any depth.
func refClosure(all map[string]any, name string) map[string]any {
	out := map[string]any{}
	var walk func(v any)
	add := func(n string) {
		if _, ok := out[n]; ok {
			return
		}
		if d, ok := all[n]; ok {
			out[n] = d
			walk(d)
		}
	}
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if ref, ok := x.(string); ok && k == "$ref" {
					if n, ok := strings.CutPrefix(ref, "#/$defs/"); ok {
						add(n)
					}
					continue
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	add(name)
	return out
}

// forMethod returns the definition of kind ("request", "response",
// "notification") of method, nil when the schema has none (an extension, a
// method newer than the schema).
func (s *acpSchema) forMethod(kind, method string) *jsonschema.Schema {
	if s == nil {
		return nil
	}
	return s.def(s.defs[kind+" "+method])
}

// checkMessage checks the params of a request or notification line: ""
// when they conform or there is nothing to check them with (a session/update
// of a kind newer than the schema is relayed as the agent sent it).
func (s *acpSchema) checkMessage(method string, isRequest bool, params json.RawMessage) string {
	if s == nil || method == "" {
		return ""
	}
	if !isRequest {
		if method == "session/update" {
			var p struct {
				Update struct {
					Kind string `json:"sessionUpdate"`
				} `json:"update"`
			}
			if json.Unmarshal(params, &p) == nil && p.Update.Kind != "" && !s.updateKinds[p.Update.Kind] {
				return ""
			}
		}
		return check(s.forMethod("notification", method), params)
	}
	return check(s.forMethod("request", method), params)
}

// check validates v (params, a result or an error) against sch; "" when it
// conforms, or when sch is nil.
func check(sch *jsonschema.Schema, v json.RawMessage) string {
	if sch == nil {
		return ""
	}
	if len(v) == 0 {
		v = json.RawMessage("null")
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(v))
	if err != nil {
		return err.Error()
	}
	if err := sch.Validate(inst); err != nil {
		return strings.ReplaceAll(err.Error(), "\n", " ")
	}
	return ""
}

// TestSchemaCheck: the checks can fail. A message of each kind the router
// writes, conforming and not: what the schema requires is enforced, an
// extension method and an update kind newer than the schema are not
// checked.
func TestSchemaCheck(t *testing.T) {
	t.Parallel()
	whole := loadSchema(t)
	if whole == nil {
		t.Skip("the schema is not installed (scripts/test.sh installs it)")
	}
	// The fake agents compile each definition from a document of its own
	// (readSchema split): the same checks must hold there.
	split, err := readSchema(schemaPath(), true)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*acpSchema{whole, split} {
		checkSchemaCases(t, s)
	}
}

func checkSchemaCases(t *testing.T, s *acpSchema) {
	t.Helper()
	kind := "whole"
	if s.all != nil {
		kind = "split"
	}
	if s == nil {
		t.Skip("the ACP schema is not installed here (scripts/test.sh installs it; CI has it)")
	}
	for _, c := range []struct {
		what, method string
		request      bool
		params       string
		ok           bool
	}{
		{"a chunk", "session/update", false, `{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}}}`, true},
		{"a chunk without content", "session/update", false, `{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk"}}`, false},
		{"an update without a session", "session/update", false, `{"update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}}}`, false},
		{"a kind newer than the schema", "session/update", false, `{"sessionId":"s","update":{"sessionUpdate":"prompt_suggestions_update","suggestions":["x"]}}`, true},
		{"a permission request", "session/request_permission", true, `{"sessionId":"s","toolCall":{"toolCallId":"t"},"options":[{"optionId":"a","name":"Allow","kind":"allow_once"}]}`, true},
		{"a permission request with an unknown option kind", "session/request_permission", true, `{"sessionId":"s","toolCall":{"toolCallId":"t"},"options":[{"optionId":"a","name":"Allow","kind":"sometimes"}]}`, false},
		{"a relative read", "fs/read_text_file", true, `{"sessionId":"s","path":"a.txt"}`, true}, // the schema says string: the router's own check
		{"a read without a path", "fs/read_text_file", true, `{"sessionId":"s"}`, false},
		{"an extension", "_vendor/thing", true, `{"anything":1}`, true},
	} {
		if got := s.checkMessage(c.method, c.request, json.RawMessage(c.params)); (got == "") != c.ok {
			t.Errorf("%s (%s): conforms %v (%s), want %v", c.what, kind, got == "", got, c.ok)
		}
	}
	for _, c := range []struct {
		what, method, result string
		ok                   bool
	}{
		{"a prompt's end", "session/prompt", `{"stopReason":"end_turn"}`, true},
		{"an unknown stop reason", "session/prompt", `{"stopReason":"tired"}`, false},
		{"a new session", "session/new", `{"sessionId":"s"}`, true},
		{"a new session without an id", "session/new", `{}`, false},
		{"a permission outcome", "session/request_permission", `{"outcome":{"outcome":"selected","optionId":"a"}}`, true},
		{"a permission outcome of no kind", "session/request_permission", `{"outcome":{"optionId":"a"}}`, false},
	} {
		if got := check(s.forMethod("response", c.method), json.RawMessage(c.result)); (got == "") != c.ok {
			t.Errorf("%s (%s): conforms %v (%s), want %v", c.what, kind, got == "", got, c.ok)
		}
	}
	if got := check(s.def("Error"), json.RawMessage(`{"code":-32603,"message":"x"}`)); got != "" {
		t.Errorf("an error (%s): %s", kind, got)
	}
	if got := check(s.def("Error"), json.RawMessage(`{"code":"bad"}`)); got == "" {
		t.Errorf("an error with a string code conforms (%s)", kind)
	}
}
