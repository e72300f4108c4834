// Package remote owns ACP's remote transport: the draft RFD "Streamable
// HTTP & WebSocket" on one /acp endpoint (issue 30 point 1). Every
// connection a client opens, over either profile, becomes one Conn handed
// to Options.Serve (the hub's Serve) with the Identity that Options.Auth
// gave its request; remote/ knows nothing of sessions beyond the routing
// the wire needs.
//
// The wire, and where the RFD is unclear what we followed: the official
// TypeScript SDK 2.4.0 (@agentclientprotocol/sdk, dist/transports/
// server.js, server-sse.js, ws-server.js, http-stream.js, ws-stream.js),
// which is the peer our tests run.
//
//   - POST /acp with an initialize request and no Acp-Connection-Id
//     creates a connection: 200 with the initialize response as the JSON
//     body and the new id in Acp-Connection-Id. Any other message needs the
//     header (400 without it, 404 for an id we do not know or that another
//     token opened) and is answered 202 with no body; its reply comes on an
//     event stream. initialize on an existing connection is 400.
//   - Content-Type must be application/json (415). A JSON array (a batch:
//     ACP has none) is 400 with one -32600 response, id null, and none of
//     its entries is processed; a body that is not JSON is 400 "Invalid
//     JSON"; a scalar is 400. A body over Options.MaxMessage is 413 naming
//     the limit.
//   - GET /acp with Accept: text/event-stream and Acp-Connection-Id is the
//     connection's stream; with Acp-Session-Id too, that session's stream
//     (the SDK opens it before its first message for the session and when
//     a response names a new sessionId). A message whose params carry a
//     sessionId goes to that session's stream, anything else to the
//     connection's; a response goes where its request came from, except
//     session/load's, which goes to the connection's stream (as the SDK's
//     server). A session stream may be opened before anything is sent on
//     it; at most MaxSessionStreams a connection. A second receiver for one
//     stream is 409. Events are "data: JSON\n\n"; a ":" comment every 15 s
//     keeps proxies from closing an idle stream; when the connection ends
//     a last comment says why (SSE has no close reason, and a data event
//     would be read as a message).
//   - A POST for a session (params.sessionId, or one of the methods the
//     SDK marks session-scoped) must carry Acp-Session-Id equal to it, and
//     a client's response to a request that came on a session stream must
//     name that session: 400 "Missing/Mismatched Acp-Session-Id" otherwise.
//   - DELETE /acp with Acp-Connection-Id ends the connection: 202 (404 if
//     unknown).
//   - GET /acp with a WebSocket upgrade: 101 with Acp-Connection-Id, then
//     one JSON-RPC message per text frame both ways. Binary frames are
//     ignored (the SDK does so); a frame that is not JSON gets -32700, a
//     batch -32600 (id null, entries not processed), a scalar -32600; the
//     first message must be initialize (else close 1002), a second
//     initialize gets -32600. A frame over Options.MaxMessage closes the
//     socket with 1009 (message too big) and says so in the reason.
//   - HTTP connections have no socket to watch: one whose connection stream
//     has no receiver for Options.IdleTimeout is ended (the SDK client
//     treats the end of that stream as the end of the connection anyway).
//   - Cookies: the SDK clients keep every Set-Cookie they receive and send
//     it back on each later request, WebSocket upgrade included. A request
//     authenticated by ?token= (the URL a user opens or pastes once) gets
//     the token back as an HttpOnly, SameSite=Strict cookie on /acp (Secure
//     under TLS), so later requests need no token in the URL.
//
// Authentication runs on every request, before anything else is read:
// failure is 401 with an empty body and nothing else. No URL, header or
// cookie is ever logged (the token can be in any of them). A connection
// belongs to the identity that opened it: another identity's requests for
// it get 404, as for an unknown id (a token created again under a revoked
// one's name is another identity). A connection outlives no revoke of its
// token: with Options.Watch, a WebSocket is closed 1008 "token revoked",
// an HTTP connection's SSE streams end with that reason, and Serve's Conn
// reads io.EOF, so the hub detaches the client as any client that goes.
//
// Besides the Server: Listen opens the listening socket and refuses an
// address other than loopback without TLS and authentication (the router
// then does not start); Bridge is acp-router connect's stdio <-> WebSocket
// bridge; LineConn is the stdio editor as one more Conn, for a router an
// editor launched that also listens.
//
// Flow control: remote/ keeps no queue of its own beyond one bounded
// buffer a stream (Options.StreamBuffer; an HTTP connection's streams
// together at most four of them): Conn.Write blocks while the
// client does not read, and gives up after Options.WriteTimeout or when
// its ctx ends, so that a dead peer holds no goroutine for ever. The hub
// calls Write from one goroutine a client and bounds its own queue.
package remote
