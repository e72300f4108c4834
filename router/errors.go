package router

import "github.com/acp-router/acp-router/acp"

// errNeedsStore answers a method that needs the session store (state_dir)
// when the router has none: not advertised, so "method not found".
func errNeedsStore(method string) error {
	return acp.NewError(acp.CodeMethodNotFound, "acp-router: "+method+" needs the session store (state_dir)", map[string]string{"method": method})
}

// errRefused answers a method the protocol table refuses, with the row's
// code.
func errRefused(code int64, method string) error {
	return acp.NewError(code, "acp-router does not support "+method, map[string]string{"method": method})
}
