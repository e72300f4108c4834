package config

import (
	"reflect"
	"testing"
)

func TestParseTelemetry(t *testing.T) {
	env := testEnv(fakeBin(t, fakeAgents...), map[string]string{"OTLP_TOKEN": "t0k"})
	for _, tc := range []struct {
		name, yaml string
		want       Telemetry
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
			ServiceName: "router-dev", ExportPrompts: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse("c.yaml", []byte("version: 1\nagents:\n  - name: a\n    command: codex-acp\n"+tc.yaml), env)
			if err != nil {
				t.Fatal(err)
			}
			got := cfg.Telemetry
			got.Pos = Pos{}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}
