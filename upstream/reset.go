package upstream

// ForgetFailures clears the restart budget: the user asked for the agent
// to be restarted (`/agent restart NAME`), so the next use starts it at
// once, even after it restarted too often.
func (a *Agent) ForgetFailures() {
	for _, c := range a.children() {
		c.ForgetFailures()
	}
	a.mu.Lock()
	a.restarts = nil
	a.mu.Unlock()
}
