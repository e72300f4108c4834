package config

import (
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/acp-router/acp-router/yamlpos"
)

func TestParseTelemetry(t *testing.T) {
	env := testEnv(fakeBin(t, fakeAgents...), map[string]string{"OTLP_TOKEN": "t0k"})
	for _, tc := range []struct {
		name, yaml string
		want       Telemetry
		set        []string // the keys Set names
	}{
		{name: "absent: off", yaml: "", want: Telemetry{}},
		{name: "full", yaml: `telemetry:
  enabled: true
  endpoint: https://otel.example:4318
  protocol: http
  headers:
    authorization: Bearer ${OTLP_TOKEN}
  sampler: parentbased_traceidratio
  sampler_arg: "0.5"
  service_name: router-dev
  export_prompts: true
`, want: Telemetry{Enabled: true, Endpoint: "https://otel.example:4318", Protocol: "http/protobuf",
			Headers: map[string]string{"authorization": "Bearer t0k"}, Sampler: "parentbased_traceidratio", SamplerArg: "0.5",
			ServiceName: "router-dev", ExportPrompts: true},
			set: []string{"enabled", "endpoint", "export_prompts", "headers", "protocol", "sampler", "sampler_arg", "service_name"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse("c.yaml", []byte("version: 1\nagents:\n  - name: a\n    command: codex-acp\n"+tc.yaml), env)
			if err != nil {
				t.Fatal(err)
			}
			got := cfg.Telemetry
			got.Pos = Pos{}
			if keys := slices.Sorted(maps.Keys(got.Set)); !slices.Equal(keys, tc.set) {
				t.Errorf("Set names %q, want %q", keys, tc.set)
			}
			got.Set = nil
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// orgTelemetry parses an org file's telemetry: block.
func orgTelemetry(t *testing.T, file, src string) (Telemetry, error) {
	t.Helper()
	root, err := yamlpos.Document(file, []byte(src), "policy file")
	if err != nil {
		t.Fatal(err)
	}
	return ParseOrgTelemetry(file, root.Content[1])
}

func TestParseOrgTelemetry(t *testing.T) {
	got, err := orgTelemetry(t, "/etc/p/10.yaml", "telemetry:\n  lock: true\n  enabled: true\n  endpoint: https://otel.acme:4317\n")
	if err != nil {
		t.Fatal(err)
	}
	if !got.Lock || !got.Enabled || got.Endpoint != "https://otel.acme:4317" || got.Set["lock"] != (Pos{File: "/etc/p/10.yaml", Line: 2, Col: 9}) {
		t.Errorf("got %+v", got)
	}
	for _, tc := range []struct{ name, src, want string }{
		{"same checks as the user's", "telemetry:\n  endpoint: localhost:4317\n", "/etc/p/10.yaml:2:13: telemetry.endpoint: expected an http:// or https:// URL"},
		{"unknown key", "telemetry:\n  lockd: true\n", `/etc/p/10.yaml:2:3: unknown key "lockd"`},
		{"no ${ENV}: the user's environment would set it", "telemetry:\n  headers: {authorization: \"Bearer ${TOKEN}\"}\n", "/etc/p/10.yaml:2:28: telemetry.headers.authorization: ${NAME} is not expanded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := orgTelemetry(t, "/etc/p/10.yaml", tc.src)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
	t.Run("lock is the org's only", func(t *testing.T) {
		env := testEnv(fakeBin(t, fakeAgents...), nil)
		_, err := Parse("c.yaml", []byte("version: 1\nagents:\n  - name: a\n    command: codex-acp\ntelemetry: {lock: true}\n"), env)
		if err == nil || !strings.Contains(err.Error(), "c.yaml:5:19: telemetry.lock: only the org layer") {
			t.Errorf("error %v", err)
		}
	})
}

func TestMergeTelemetry(t *testing.T) {
	env := testEnv(fakeBin(t, fakeAgents...), nil)
	user := func(t *testing.T, block string) Telemetry {
		t.Helper()
		cfg, err := Parse("/home/u/config.yaml", []byte("version: 1\nagents:\n  - name: a\n    command: codex-acp\n"+block), env)
		if err != nil {
			t.Fatal(err)
		}
		return cfg.Telemetry
	}
	org := func(t *testing.T, file, block string) Telemetry {
		t.Helper()
		o, err := orgTelemetry(t, file, block)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	const orgBlock = "telemetry:\n  enabled: true\n  endpoint: https://otel.acme:4317\n  headers: {x-org: acme}\n  export_prompts: false\n"
	const userBlock = "telemetry:\n  enabled: false\n  endpoint: http://localhost:4317\n  export_prompts: true\n  service_name: mine\n"

	t.Run("org keys are defaults the user overrides", func(t *testing.T) {
		e := MergeTelemetry([]Telemetry{org(t, "/etc/p/10.yaml", orgBlock)}, user(t, userBlock))
		if e.Enabled || e.Endpoint != "http://localhost:4317" || !e.ExportPrompts || e.ServiceName != "mine" ||
			e.Headers["x-org"] != "acme" || e.Lock || len(e.Ignored) != 0 {
			t.Errorf("got %+v", e)
		}
		if src := e.From["headers"]; !src.Org || src.Pos != (Pos{File: "/etc/p/10.yaml", Line: 4, Col: 12}) {
			t.Errorf("headers from %+v", src)
		}
		if src := e.From["endpoint"]; src.Org || src.Pos != (Pos{File: "/home/u/config.yaml", Line: 7, Col: 13}) {
			t.Errorf("endpoint from %+v", src)
		}
		if _, ok := e.From["sampler"]; ok {
			t.Error("sampler: set by nobody, but From names it")
		}
	})
	t.Run("locked: the user's block is ignored, key by key, with a warning", func(t *testing.T) {
		e := MergeTelemetry([]Telemetry{org(t, "/etc/p/10.yaml", orgBlock), org(t, "/etc/p/20.yaml", "telemetry: {lock: true}\n")},
			user(t, userBlock))
		if !e.Enabled || e.Endpoint != "https://otel.acme:4317" || e.ExportPrompts || e.ServiceName != "" || !e.Lock ||
			e.LockPos != (Pos{File: "/etc/p/20.yaml", Line: 1, Col: 19}) {
			t.Errorf("got %+v", e)
		}
		want := []string{
			"/home/u/config.yaml:6:12: telemetry.enabled is ignored: the org locks telemetry (/etc/p/20.yaml:1:19)",
			"/home/u/config.yaml:7:13: telemetry.endpoint is ignored: the org locks telemetry (/etc/p/20.yaml:1:19)",
			"/home/u/config.yaml:9:17: telemetry.service_name is ignored: the org locks telemetry (/etc/p/20.yaml:1:19)",
			"/home/u/config.yaml:8:19: telemetry.export_prompts is ignored: the org locks telemetry (/etc/p/20.yaml:1:19)",
		}
		slices.Sort(want)
		got := slices.Sorted(slices.Values(e.Ignored))
		if !slices.Equal(got, want) {
			t.Errorf("Ignored =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})
	t.Run("a later org file overrides an earlier one's key", func(t *testing.T) {
		e := MergeTelemetry([]Telemetry{org(t, "/etc/p/10.yaml", orgBlock), org(t, "/etc/p/20.yaml", "telemetry: {endpoint: \"https://eu.acme:4317\"}\n")}, Telemetry{})
		if e.Endpoint != "https://eu.acme:4317" || e.From["endpoint"].Pos.File != "/etc/p/20.yaml" || !e.Enabled {
			t.Errorf("got %+v", e)
		}
	})
	t.Run("a change of the org's block changes the fingerprint", func(t *testing.T) {
		c := &Config{Telemetry: user(t, "")}
		before := c.Keys()
		c.OrgTelemetry = []Telemetry{org(t, "/etc/p/10.yaml", orgBlock)}
		if got := Changed(before, c.Keys()); !slices.Equal(got, []string{"telemetry"}) {
			t.Errorf("Changed = %q", got)
		}
		moved := &Config{Telemetry: c.Telemetry, OrgTelemetry: []Telemetry{org(t, "/etc/p/50.yaml", "\n\n"+orgBlock)}}
		if got := Changed(c.Keys(), moved.Keys()); len(got) != 0 {
			t.Errorf("the same block in another file and line: Changed = %q", got)
		}
		locked := &Config{Telemetry: c.Telemetry, OrgTelemetry: append(slices.Clone(c.OrgTelemetry), org(t, "/etc/p/20.yaml", "telemetry: {lock: true}\n"))}
		if got := Changed(c.Keys(), locked.Keys()); !slices.Equal(got, []string{"telemetry"}) {
			t.Errorf("locked: Changed = %q", got)
		}
	})
}
