module github.com/acp-router/acp-router

go 1.26.0

require (
	github.com/bmatcuk/doublestar/v4 v4.10.4 // indirect
	github.com/coder/acp-go-sdk v0.13.0 // indirect
	github.com/fatih/color v1.13.0 // indirect
	github.com/hashicorp/go-hclog v1.6.3 // indirect
	github.com/mattn/go-colorable v0.1.12 // indirect
	github.com/mattn/go-isatty v0.0.14 // indirect
	github.com/sourcegraph/jsonrpc2 v0.2.3 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	mvdan.cc/sh/v3 v3.14.1 // indirect
)

tool (
	github.com/coder/acp-go-sdk/example/agent
	github.com/coder/acp-go-sdk/example/client
)
