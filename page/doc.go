// Package page is the web page a browser opens on a listening router
// (issue 31): watch the sessions, answer the agent's permission requests
// from a phone, read the policy's decisions.
//
// Design, and the reasons for it:
//
//   - Served by remote/ on the listening address, at / (the page) and
//     /page/ (its script and style) and /api/ (JSON), behind the very
//     authentication of /acp: the token in the URL the router prints once
//     (remote/ then sets the HttpOnly, SameSite=Strict cookie on /, so the
//     page and its WebSocket carry it), or a bearer header. Without a valid
//     token the page is a static sign-in error (401, no script) and every
//     other path a bare 401: nothing about sessions, agents or the audit
//     leaks to an unauthenticated or revoked client.
//   - Plain HTML, CSS and JavaScript embedded with embed: no build step, no
//     request to any host but the router. Every response carries a strict
//     Content-Security-Policy (default-src 'self', no inline script or
//     style, connect-src 'self', frame-ancestors 'none'), nosniff,
//     no-referrer and no-store; the test reads the header.
//   - The page is an ACP client of its own over the router's WebSocket
//     /acp, like any other remote client: initialize, session/list,
//     session/attach as an observer with historyPolicy full; "Take control"
//     detaches and attaches again as a controller (only a controller is
//     sent permission requests, RFD #533). A permission request's buttons
//     are the options the agent offered; pressing one is the ACP answer to
//     that request, so the hub's first-answer-wins, permission_resolved and
//     the audit's answeredBy (the token's name) hold for the page as for
//     any client; nothing is decided here.
//   - What ACP does not carry: each live session's state (waiting for you,
//     running, idle) and the agent it is on are pushed by the hub on the
//     page's own ACP connection: at connect the page asks
//     _acp-router/watch (the live list now, then
//     _acp-router/sessions_changed at each change; the hub holds that
//     state; the same visibility rules as _acp-router/sessions; no second
//     authentication path), and reads session/list once for titles and
//     working directories (again only when a session it does not know
//     appears). A stored session the router does not run shows as "not
//     running". The same call asks the hub to hold streamed text 16 ms
//     (chunkIntervalMs), so that an agent's 10,000 chunks a second reach
//     the page as about 60 messages a second, coalesced: a browser's
//     WebSocket has no backpressure, and a page sent more messages than it
//     can parse falls behind without bound. The audit timeline instead is a small JSON endpoint
//     rather than a hub method: it is a file the
//     router writes (config audit.file), read with filters and pages; a
//     plain GET keeps it out of the session machinery, lets the browser
//     page through it without a live connection, and is refused (403) to a
//     token that may not see every session (AllSessions), since the audit
//     names every agent's sessions. GET /api/audit?agent=&session=&rule=
//     &effect=&before=&limit= returns the newest matching records first,
//     with a cursor for the next page, and the counts per rule over the
//     last 24 hours, over the rotated files too (FILE.N ... FILE.1, FILE).
//     The handler keeps an index of the log (AuditReader: a few fields and
//     the offset of each record), brought up to date at each request by
//     reading only what was appended since (a rotated file is known by its
//     inode: audit/ only renames it), so that a page costs its records,
//     not the log.
//   - Roles: GET /api/me says who the token is and the most it may be
//     (the hub's reading of Identity.Role: anything but observer
//     controls). The page offers "Take control" only to a token that may
//     control, since the hub refuses an observer token's attach as a
//     controller; a session waiting for a permission answer (the list's
//     state: an observer is not sent the request) shows so, read-only.
//   - Tool calls show their kind, title and status; a diff (path,
//     oldText, newText; oldText null for a new file) as a unified diff
//     with three lines of context, computed in the page by Myers'
//     algorithm on lines, bounded: past 20,000 lines, 4 MiB or 2,000
//     changed lines the old and new text are shown whole instead; the
//     command line (rawInput.command, a string or an argv array, else an
//     execute call's title), its output where the update carries it as
//     text content, or "output in the editor's terminal" for terminal
//     content (an id only).
//   - No layout shift while a reply streams or a request arrives (issue
//     31 point 6): a permission request shows in a dock stuck to the
//     bottom of the window, under the log, which it never moves; the plan
//     is one line of the session's head, always there, that opens over
//     the log; the log follows its end only while the reader is at the
//     end, and entries that leave the DOM leave their height as padding.
//     On a narrow screen an open session has the screen to itself ("All
//     sessions" goes back), so that the list's changes move nothing. A
//     permission request does not take the keyboard focus (an Enter meant
//     for another button must not answer it); every control is reached
//     by Tab and shows a focus ring of 3:1 contrast or more.
//   - Rendering: everything an agent sends is text. The script never
//     assigns innerHTML; it builds nodes with createElement and
//     createTextNode. Agent messages get a small Markdown subset (headings,
//     paragraphs, lists, fenced and inline code, bold and italics) built as
//     DOM nodes; a link is text that shows its URL, never an anchor (a
//     javascript: URL never runs); messages over 64 KiB are shown as plain preformatted text.
//     Bidi control characters (U+202A-U+202E, U+2066-U+2069, U+200E,
//     U+200F, U+061C) are replaced by a visible escape such as ⟦U+202E⟧,
//     and each piece of agent text sits in an isolated (unicode-bidi:
//     isolate) element, so that no agent text can reorder the page around
//     it. Streamed chunks are batched into one render per animation frame;
//     a session's history is paged (the newest 200 entries, earlier ones on
//     request), so 50,000 entries stay responsive.
package page
