package acp

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"

	"github.com/acp-router/acp-router/internal/owner"
)

// traceBytes bounds a message body in a trace log line.
const traceBytes = 4096

// Defaults for StreamOptions.
const (
	DefaultMaxLine    = 64 << 20
	DefaultQueueBytes = 64 << 20
)

// Stream errors.
var (
	// ErrLineTooLong: a line exceeded StreamOptions.MaxLine; it was skipped.
	ErrLineTooLong = errors.New("message exceeds the line limit")
	// ErrClosed: the stream no longer accepts writes.
	ErrClosed = errors.New("stream closed")
	// ErrQueueFull: a non-blocking queue would exceed its byte bound.
	ErrQueueFull = errors.New("write queue full: the peer is not reading")
	// ErrStalled: the peer made no progress reading for the stall timeout.
	ErrStalled = errors.New("peer stopped reading its input")
)

// StreamOptions configure a Stream. The zero value is usable.
type StreamOptions struct {
	// MaxLine bounds one incoming message; default DefaultMaxLine.
	MaxLine int
	// QueueBytes bounds the bytes waiting to be written; default
	// DefaultQueueBytes. One message larger than the bound is still accepted
	// when the queue is empty. With lanes, it is the hard cap WaitRoom
	// waits for, whatever the lane.
	QueueBytes int
	// Blocking makes writers wait for room in a full queue (backpressure).
	// Otherwise a write that would overflow fails the stream with
	// ErrQueueFull (for agents: the peer is not reading). Lanes ignore it.
	Blocking bool
	// LaneBytes, when positive, splits the queue into lanes, one per
	// session (see LaneOf), plus one shared lane for messages without a
	// session. Order is kept within a lane; the writer serves the lanes in
	// turn, up to maxBatch bytes each, so that a session with megabytes
	// queued delays another's message by one batch, not by its backlog (the
	// editor). A write never waits and never fails for want of room: the
	// producers that can flood call WaitRoom once they hold no lock, and it
	// waits until their lane holds less than LaneBytes queued (the batch
	// being written is not counted: the producer reads its next message
	// while the writer writes) and the whole queue less than QueueBytes. A
	// lane thus holds at most LaneBytes, plus what its producers write
	// between two WaitRoom calls, plus the batch being written.
	LaneBytes int
	// StallTimeout, when positive, declares the peer hung when queued bytes
	// make no progress for that long.
	StallTimeout time.Duration
	// OnFail is called once, from any goroutine, when the write side fails
	// (stall, overflow or a write error).
	OnFail func(error)
	// AnswerInvalid makes the stream answer lines it cannot pass on with a
	// JSON-RPC error (the editor side, DESIGN §7); otherwise they are logged
	// and dropped (the agent side).
	AnswerInvalid bool
	// Prescan, when set, has the members it names read from the params of
	// its method's messages while the line is validated
	// (Message.Prescanned): one scan of the line instead of two.
	Prescan *Prescan
	// Intercept sees every valid message before the jsonrpc2.Conn, in the
	// read loop, in order. Returning true consumes it. It must not block on
	// the peer that is being read.
	Intercept func(*Message) bool
	// Batch, when set, is called before Intercept is handed a line that
	// was read together with more (they are already buffered), and the
	// function it returns (nil: none) once the last of them was handed over,
	// or before ReadObject returns: what the lines in between produce can
	// go out with one system call (another Stream's Cork and Uncork).
	Batch  func() (end func())
	Logger hclog.Logger
}

// Stream is a jsonrpc2.ObjectStream over newline-delimited JSON (ACP's stdio
// transport). It reads one bounded line at a time and never dies on a bad
// line; it writes through a byte-bounded FIFO drained by one goroutine, so a
// peer that stops reading cannot freeze the caller (STYLE.md). When w is a
// non-blocking pipe (an agent's stdin) and nothing is queued, a message is
// written by the caller itself, as far as the pipe takes it without
// blocking, and only the rest is queued: a goroutine hand-off less per
// message (issue 6).
type Stream struct {
	opts StreamOptions
	log  hclog.Logger
	r    *bufio.Reader
	rc   io.Closer
	w    io.WriteCloser

	mu   sync.Mutex
	cond *sync.Cond // wakes the writer goroutine
	room *sync.Cond // wakes writers waiting for room (Blocking, WaitRoom)
	// The queue: the shared lane (the only one without LaneBytes), the
	// session lanes that hold bytes (queued or being written), and the
	// lanes with messages queued, in the order the writer serves them:
	// first the fresh ones (the first fresh of ring: they had nothing
	// queued), in the order they came, then the others in turn.
	shared *lane
	lanes  map[string]*lane
	ring   []*lane
	fresh  int
	spare  *lane // a drained lane, for the next new one
	// aliases send one key's messages to another's lane (a subagent
	// session's to its top-level session's: they must interleave as sent).
	aliases  map[string]string
	queued   int   // bytes in all lanes, "\n" included, until written
	closing  bool  // no new writes; the writer drains and closes w
	err      error // set once the write side failed
	progress time.Time
	writing  bool // the writer goroutine or a direct write is using w

	// direct writes to w without blocking, when it can (see Stream);
	// lineBuf is its message and "\n" (used by whoever set writing).
	// lastWrite is when WriteRaw last wrote or queued a message; burst
	// counts the messages since the last pause of directGap.
	direct  directWriter
	lineBuf []byte
	// directBatch is the messages of a direct write (writeQueuedDirect).
	directBatch []queued
	lastWrite   time.Time
	burst       int
	// corks counts the Cork calls not yet undone: while it is positive,
	// small messages are queued without waking the writer.
	corks int

	done     chan struct{} // closed when the writer goroutine exits
	failOnce sync.Once
	// owned are the stream's goroutines: the writer, the stall watchdog,
	// and what a failure starts (closing w, OnFail). Wait waits for them.
	owned owner.Group

	// Ids sourcegraph/jsonrpc2 cannot echo exactly are replaced by tokens
	// on the way in and restored on the way out.
	idMu     sync.Mutex
	idTokens map[string]json.RawMessage
	idSeq    uint64
	// With lanes, by IDKey: answerLanes, the session each of the peer's
	// pending requests named (the lane of its answer); callLanes, the lane
	// of each of our requests pending at the peer (the lane of a
	// $/cancel_request for it). Each is bounded by maxLaneIDs; lost counts
	// the ids that could not be remembered.
	answerLanes map[string]string
	callLanes   map[string]string
	lost        int

	writtenBytes atomic.Int64

	// head is the start of the last line over MaxLine (at most headBytes):
	// where its id is, so that it can be answered (readLine, tooLong).
	head []byte
	// longLine is the length of the last line longer than the reader's
	// buffer (read loop only).
	longLine int
	// readErr is why reading ended, when it was not the peer closing
	// (EOF) or us closing the stream.
	readErr atomic.Value // error
	// drain is how far the reader has read, when it can tell (Drained).
	drain *drain
}

const (
	// maxLongLineHint bounds the buffer a long line starts with.
	maxLongLineHint = 8 << 20
	// maxDirect bounds a message WriteRaw writes itself: a pipe's
	// default capacity.
	maxDirect = 64 << 10
	// directGap: messages closer together than this are a burst. Beyond
	// its first directBurst messages, a burst (a flood of updates, prompts
	// of many sessions) is queued instead of written directly, so that the
	// writer goroutine writes it with one system call (and wakes the peer
	// once): a write per message costs more than the hand-off then.
	directGap = 50 * time.Microsecond
	// directBurst: the first messages after a pause are written directly
	// all the same: a turn's last update and its answer come together, and
	// handing the answer to the writer goroutine costs two thread switches
	// on the prompt round trip. A longer burst is a flood.
	directBurst = 2
	// maxBatch: the writer takes queued messages up to this many bytes at
	// a time (at least one), and frees their room when they are written.
	// With lanes it is also the quantum: the most a lane's turn writes.
	maxBatch = 64 << 10
	// maxLaneIDs bounds the requests whose lane a stream remembers, each
	// way; the answers to others, and $/cancel_request for them, go in the
	// shared lane.
	maxLaneIDs = 4096
)

// lane is one FIFO of the write queue.
type lane struct {
	key    string
	msgs   []queued // queued from head on (their l unset)
	head   int
	bytes  int  // queued, "\n" included: what WaitRoom weighs
	taken  int  // taken by the writer, not written yet
	ringed bool // in Stream.ring: it has messages queued
}

func (l *lane) empty() bool { return l.head == len(l.msgs) }

// NewStream starts the writer goroutine (and the stall watchdog when a stall
// timeout is set). r is read by ReadObject; w is closed when the stream is.
func NewStream(r io.ReadCloser, w io.WriteCloser, opts StreamOptions) *Stream {
	if opts.MaxLine <= 0 {
		opts.MaxLine = DefaultMaxLine
	}
	if opts.QueueBytes <= 0 {
		opts.QueueBytes = DefaultQueueBytes
	}
	if opts.Prescan != nil {
		if err := opts.Prescan.Check(); err != nil {
			panic(err) // a constant of the caller's code
		}
	}
	s := &Stream{
		opts:     opts,
		log:      opts.Logger,
		rc:       r,
		w:        w,
		shared:   &lane{},
		done:     make(chan struct{}),
		idTokens: map[string]json.RawMessage{},
		direct:   newDirectWriter(w),
	}
	if opts.LaneBytes > 0 {
		s.lanes = map[string]*lane{}
		s.answerLanes = map[string]string{}
		s.callLanes = map[string]string{}
	}
	raw, d := newRawReader(r)
	s.r, s.drain = bufio.NewReaderSize(raw, 64<<10), d
	if s.log == nil {
		s.log = hclog.NewNullLogger()
	}
	s.cond = sync.NewCond(&s.mu)
	s.room = sync.NewCond(&s.mu)
	s.owned.Go(s.writeLoop)
	if opts.StallTimeout > 0 {
		s.owned.Go(s.watchdog)
	}
	return s
}

// ReadObject implements jsonrpc2.ObjectStream: it returns the next message
// the jsonrpc2.Conn should see, answering or skipping everything else.
func (s *Stream) ReadObject(v any) error {
	var endBatch func()
	if s.opts.Batch != nil {
		defer func() {
			if endBatch != nil {
				endBatch()
			}
		}()
	}
	for {
		if endBatch != nil && s.r.Buffered() == 0 {
			endBatch() // before the read that may wait
			endBatch = nil
		}
		if s.drain != nil && s.r.Buffered() == 0 {
			s.drain.boundary = true
		}
		line, sh, err := s.readLine()
		if s.opts.Batch != nil && endBatch == nil && err == nil && s.r.Buffered() > 0 {
			endBatch = s.opts.Batch()
		}
		if errors.Is(err, ErrLineTooLong) {
			id, kind := headID(s.head)
			s.log.Warn("message over the line limit skipped", "limit", s.opts.MaxLine, "kind", kind, "id", string(id))
			msg := fmt.Sprintf("acp-router: message exceeds the %d-byte limit", s.opts.MaxLine)
			switch kind {
			case KindResponse:
				// The answer to one of the calls made on this stream: the
				// call gets an error in its place, not silence (the agent
				// that asked to read a file too large to relay would wait
				// for ever).
				line, sh, err = errorLine(id, jsonError(CodeInternalError, msg)), nil, nil
			case KindRequest:
				// Answered on either side: with its id, unambiguous.
				s.answerID(id, jsonError(CodeInvalidRequest, msg))
				continue
			default:
				s.answerInvalid(nil, jsonError(CodeInvalidRequest, msg))
				continue
			}
		}
		if err != nil {
			s.noteReadErr(err)
			if s.drain != nil {
				s.drain.end()
			}
			return err
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if s.log.IsTrace() {
			s.log.Trace("recv", "message", truncate(line, traceBytes))
		}
		m, err := ClassifyPrescan(line, s.opts.Prescan)
		if errors.Is(err, ErrParse) && !utf8.Valid(line) {
			line, sh = s.repairUTF8(line, sh)
			m, err = ClassifyPrescan(line, s.opts.Prescan)
		}
		if err != nil {
			s.invalid(m, err)
			continue
		}
		m.shared = sh
		switch m.Kind {
		case KindResponse:
			if !m.HasID() || !plainID(m.ID) {
				// Codex answers notifications and unparsable lines with
				// id-less errors; jsonrpc2 would resolve its call 0 with them.
				s.log.Warn("response without a usable id dropped", "id", string(m.ID), "error", truncate(m.Error, 200))
				continue
			}
			if s.callLanes != nil {
				s.takeLane(s.callLanes, m.ID)
			}
		case KindRequest:
			if string(m.ID) == "null" {
				// jsonrpc2 would treat it as a notification and never answer.
				s.answerInvalid(m.ID, jsonError(CodeInvalidRequest, "acp-router: a request id must not be null"))
				continue
			}
			// A string id with a NUL could be one of our tokens: a
			// peer's answer would then be given another request's id.
			if !plainID(m.ID) || bytes.Contains(m.ID, []byte(`\u0000`)) {
				if m, err = s.tokenizeID(m); err != nil {
					s.invalid(m, err)
					continue
				}
			}
		}
		// The lane of the answer, whoever answers (the Conn, or the
		// Intercept's fast path: Peer.ReplyRaw).
		laned := false
		if m.Kind == KindRequest && s.answerLanes != nil {
			if key := SessionID(m.Params); key != "" {
				s.putLane(s.answerLanes, m.ID, key)
				laned = true
			}
		}
		if s.opts.Intercept != nil && s.opts.Intercept(m) {
			continue
		}
		if err := decodeValid(m.Raw, v); err != nil {
			// Classify accepted it, so this is a jsonrpc2 limitation.
			s.invalid(m, fmt.Errorf("%w: %v", ErrNotRPC, err))
			if laned {
				s.takeLane(s.answerLanes, m.ID)
			}
			continue
		}
		return nil
	}
}

// repairUTF8 is the line that is not UTF-8 (RFC 8259 §8.1) read as a
// decoder in Go or a JavaScript TextDecoder reads it: each run of bytes
// that is not UTF-8 becomes U+FFFD. Passed on as it came, it would end the
// connection of a peer that reads its input strictly as UTF-8 (the Rust
// ACP crate's read_line, in Zed and in Rust agents), every session of
// every agent with it. The line's pooled buffer, if any, goes back.
func (s *Stream) repairUTF8(line []byte, sh *Shared) ([]byte, *Shared) {
	s.log.Warn("bytes that are not UTF-8 replaced with U+FFFD", "line", truncate(line, 200))
	fixed := bytes.ToValidUTF8(line, []byte("\uFFFD"))
	if sh != nil {
		sh.Release()
	}
	return fixed, nil
}

// decodeValid is json.Unmarshal(line, v) for a line Classify has validated:
// what jsonrpc2 gives ReadObject decodes itself (json.Unmarshaler), so the
// validation pass json.Unmarshal makes first over the whole line would be
// the second one.
func decodeValid(line []byte, v any) error {
	if u, ok := v.(json.Unmarshaler); ok && !isNilPointer(v) {
		// json.Unmarshal hands an Unmarshaler the value without the
		// surrounding space.
		return u.UnmarshalJSON(bytes.Trim(line, " \t\r\n"))
	}
	return json.Unmarshal(line, v)
}

func isNilPointer(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

func (s *Stream) invalid(m *Message, err error) {
	s.log.Warn("invalid message", "error", err, "line", truncate(m.Raw, 200))
	code := CodeInvalidRequest
	if errors.Is(err, ErrParse) {
		code = CodeParseError
	}
	var id json.RawMessage
	if m.Kind != KindResponse && m.Kind != KindNotification {
		id = m.ID
	}
	s.answerInvalid(id, jsonError(code, err.Error()))
}

// errorLine is an error response to id ("null" when nil) with error e.
func errorLine(id json.RawMessage, e []byte) []byte {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	line := make([]byte, 0, len(id)+len(e)+40)
	line = append(line, `{"jsonrpc":"2.0","id":`...)
	line = append(line, id...)
	line = append(line, `,"error":`...)
	line = append(line, e...)
	return append(line, '}')
}

// headBytes is how much of a line over MaxLine is kept to find its id.
const headBytes = 4 << 10

// keepHead keeps the first headBytes of a line over MaxLine, whose bytes
// so far are a then b.
func (s *Stream) keepHead(a, b []byte) {
	s.head = s.head[:0]
	for _, p := range [][]byte{a, b} {
		s.head = append(s.head, p[:min(len(p), headBytes-len(s.head))]...)
	}
}

// answerInvalid writes an error response when this stream answers bad
// input. id nil or "null" gives "id":null (JSON-RPC 2.0 §5).
func (s *Stream) answerInvalid(id json.RawMessage, e []byte) {
	if !s.opts.AnswerInvalid {
		return
	}
	s.answerID(id, e)
}

// answerID writes an error response to the request id.
func (s *Stream) answerID(id json.RawMessage, e []byte) {
	if err := s.WriteRawLane("", errorLine(id, e)); err != nil {
		s.log.Debug("cannot answer invalid message", "error", err)
	}
}

func jsonError(code int, msg string) []byte {
	b, _ := json.Marshal(struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{code, msg})
	return b
}

// readLine returns the next line, freshly allocated, without "\n" or
// "\r\n". A line over MaxLine is consumed and reported as ErrLineTooLong.
// A line that fits in the reader's buffer is copied out of it once. A
// longer one is gathered in a pooled buffer (sh, held once: see Shared)
// sized like the last long line, so a run of large messages (a flood of
// 1 MiB updates) costs no allocation once their buffers come back, and no
// copy: grown by append from nothing, a 1 MiB line cost 4.6 MB of
// allocations.
func (s *Stream) readLine() (line []byte, sh *Shared, err error) {
	var buf []byte
	tooLong := false
	defer func() {
		if err != nil && sh != nil {
			sh.Release()
			sh = nil
		}
	}()
	for {
		chunk, err := s.r.ReadSlice('\n')
		if !tooLong {
			switch {
			case len(buf)+len(chunk) > s.opts.MaxLine+2: // room for "\r\n"
				s.keepHead(buf, chunk)
				tooLong, buf = true, nil
			case err == nil && buf == nil: // the whole line is buffered
				line := bytes.TrimSuffix(chunk[:len(chunk)-1], []byte{'\r'})
				if len(line) > s.opts.MaxLine {
					s.keepHead(line, nil)
					return nil, sh, ErrLineTooLong
				}
				if sh := getLine(len(line)); sh != nil { // a pooled copy
					sh.b = append(sh.b, line...)
					return sh.b, sh, nil
				}
				return clone(line), nil, nil
			default:
				if buf == nil {
					size := len(chunk)
					if errors.Is(err, bufio.ErrBufferFull) {
						size = min(max(s.longLine, 2*size), s.opts.MaxLine+2)
					}
					if sh = getLine(size); sh != nil {
						buf = sh.b
					} else {
						buf = make([]byte, 0, size)
					}
				}
				if need := len(buf) + len(chunk); sh != nil && cap(buf) < need {
					size := min(max(2*cap(buf), need), s.opts.MaxLine+2)
					if size > maxPooled && need <= maxPooled {
						size = maxPooled // still pooled
					}
					buf, sh = growLine(buf, sh, size)
				}
				buf = append(buf, chunk...)
			}
		}
		switch {
		case err == nil:
			if tooLong {
				return nil, sh, ErrLineTooLong
			}
			s.longLine = min(len(buf), maxLongLineHint)
			line := bytes.TrimSuffix(buf[:len(buf)-1], []byte{'\r'})
			if len(line) > s.opts.MaxLine {
				s.keepHead(line, nil)
				return nil, sh, ErrLineTooLong
			}
			line, sh = fitLine(line, sh)
			return line, sh, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && (len(buf) > 0 || tooLong):
			// A last line without "\n" still counts, and so does its limit.
			if tooLong || len(buf) > s.opts.MaxLine {
				if !tooLong {
					s.keepHead(buf, nil)
				}
				return nil, sh, ErrLineTooLong
			}
			line, sh := fitLine(buf, sh)
			return line, sh, nil
		default:
			return nil, sh, err
		}
	}
}

// growLine moves line, in sh's pooled buffer, to one of at least size
// bytes (pooled when it can). sh is left to the garbage collector, not
// returned to the pool: a buffer a line outgrew is of a size the next
// lines (sized like this one) will not ask for, and the collector can
// reuse its memory where the pool would keep it for two collections.
func growLine(line []byte, sh *Shared, size int) ([]byte, *Shared) {
	next := getLine(size)
	var out []byte
	if next != nil {
		out = append(next.b, line...)
	} else {
		out = append(make([]byte, 0, size), line...)
	}
	sh.refs.Store(0)
	return out, next
}

// fitLine is fit for a line in sh's pooled buffer (sh nil: not pooled): a
// line more than an eighth shorter than its buffer moves to a buffer of its
// size, and the large one is left to the garbage collector (see growLine).
func fitLine(line []byte, sh *Shared) ([]byte, *Shared) {
	if sh == nil {
		return fit(line), nil
	}
	if cap(line)-len(line) <= len(line)/8 {
		return line[:len(line):len(line)], sh
	}
	small := getLine(len(line))
	var out []byte
	if small != nil {
		out = append(small.b, line...)
	} else {
		out = clone(line)
	}
	sh.refs.Store(0)
	return out[:len(out):len(out)], small
}

// fit returns b capped at its length, or a copy of its own size when its
// buffer is more than an eighth larger (a line shorter than the last long
// one): a retained message holds no more memory than it needs.
func fit(b []byte) []byte {
	if cap(b)-len(b) > len(b)/8 {
		return clone(b)
	}
	return b[:len(b):len(b)]
}

// clone copies b into a slice of its own length and capacity.
func clone(b []byte) []byte { return append(make([]byte, 0, len(b)), b...) }

func truncate(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "…"
}

// tokenId is a string no sane peer uses as an id; it stands for an id that
// jsonrpc2 cannot echo exactly (negative, fractional, exponent, huge).
const tokenPrefix = "\x00acp-router-id:"

func (s *Stream) tokenizeID(m *Message) (*Message, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(m.Raw, &fields); err != nil {
		return m, err
	}
	s.idMu.Lock()
	s.idSeq++
	tok := tokenPrefix + strconv.FormatUint(s.idSeq, 10)
	s.idTokens[tok] = m.ID
	s.idMu.Unlock()
	fields["id"], _ = json.Marshal(tok)
	raw, err := json.Marshal(fields)
	if err != nil {
		return m, err
	}
	out := *m
	out.Raw, out.ID = raw, fields["id"]
	return &out, nil
}

// restoreID puts back the original id of a response to a tokenized request.
func (s *Stream) restoreID(line []byte) []byte {
	s.idMu.Lock()
	n := len(s.idTokens)
	s.idMu.Unlock()
	if n == 0 || !bytes.Contains(line, []byte(`acp-router-id:`)) {
		return line
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(line, &fields) != nil {
		return line
	}
	var tok string
	if json.Unmarshal(fields["id"], &tok) != nil {
		return line
	}
	s.idMu.Lock()
	orig, ok := s.idTokens[tok]
	delete(s.idTokens, tok)
	s.idMu.Unlock()
	if !ok {
		return line
	}
	fields["id"] = orig
	out, err := json.Marshal(fields)
	if err != nil {
		return line
	}
	return out
}

// IsToken reports whether id (raw JSON) is a stand-in for an id the peer
// sent that jsonrpc2 cannot represent. Such ids are never reused elsewhere.
func IsToken(id json.RawMessage) bool {
	return bytes.HasPrefix(id, []byte(`"\u0000acp-router-id:`))
}

// WriteObject implements jsonrpc2.ObjectStream: it encodes obj and queues
// it, in the lane LaneOf names.
func (s *Stream) WriteObject(obj any) error {
	b, err := encodeLine(obj)
	if err != nil {
		return err
	}
	key := ""
	if s.lanes != nil {
		key = s.LaneOf(b) // before restoreID: answerLanes has the Conn's ids
	}
	return s.WriteRawLane(key, s.restoreID(b))
}

// writeAnswer queues line, the answer to the peer's request id (as the
// stream passed it on: a token when it stood for another), in the lane of
// the session that request named.
func (s *Stream) writeAnswer(id json.RawMessage, line []byte) error {
	key := ""
	if s.answerLanes != nil {
		key, _ = s.takeLane(s.answerLanes, id)
	}
	return s.WriteRawLane(key, s.restoreID(line))
}

// encodeLine is json.Marshal(obj). What jsonrpc2 writes marshals itself
// (json.Marshaler) with json.Marshal inside, so its output is already
// compact and escaped; json.Marshal would only validate and compact it once
// more. That pass is skipped when the output is one line of valid JSON.
func encodeLine(obj any) ([]byte, error) {
	if m, ok := obj.(json.Marshaler); ok && !isNilPointer(obj) {
		if b, err := m.MarshalJSON(); err == nil && validJSON(b) && compact(b) {
			return b, nil
		}
	}
	return json.Marshal(obj)
}

// compact reports whether valid JSON b has no whitespace outside strings
// and nothing json.Marshal would escape (<, >, &, U+2028, U+2029): then
// json.Marshal of a Marshaler returning b returns b.
func compact(b []byte) bool {
	in := false
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case in && c == '\\':
			i++
		case c == '"':
			in = !in
		case !in && isSpace(c):
			return false
		case c == '<' || c == '>' || c == '&':
			return false
		case c == 0xE2 && i+2 < len(b) && b[i+1] == 0x80 && (b[i+2] == 0xA8 || b[i+2] == 0xA9):
			return false
		}
	}
	return true
}

// WriteRaw queues one encoded message (without its trailing newline), in
// the lane LaneOf names. The relay uses it to forward a peer's line byte for
// byte. msg is retained until written: the caller must not modify it.
func (s *Stream) WriteRaw(msg []byte) error {
	key := ""
	if s.lanes != nil {
		key = s.LaneOf(msg)
	}
	return s.WriteRawLane(key, msg)
}

// WriteRawLane is WriteRaw into the lane of session key ("": the shared
// lane), for a caller that knows it: the message is not read to find it.
// Without lanes, key is ignored.
func (s *Stream) WriteRawLane(key string, msg []byte) error {
	return s.WriteRawShared(key, msg, nil)
}

// WriteRawShared is WriteRawLane of a message in a pooled buffer (sh, nil:
// none), which it holds (Shared.Hold) until the message is written. (A
// message dropped by a failed stream is left to the garbage collector.)
func (s *Stream) WriteRawShared(key string, msg []byte, sh *Shared) error {
	n := len(msg) + 1
	s.mu.Lock()
	for {
		if s.err != nil {
			s.mu.Unlock()
			return s.err
		}
		if s.closing {
			s.mu.Unlock()
			return ErrClosed
		}
		if s.lanes != nil || s.queued == 0 || s.queued+n <= s.opts.QueueBytes {
			break
		}
		if !s.opts.Blocking {
			s.failLocked(fmt.Errorf("%w (%d bytes queued)", ErrQueueFull, s.queued))
			s.mu.Unlock()
			return s.err
		}
		s.room.Wait()
	}
	l := s.laneLocked(key)
	var now time.Time
	if s.direct != nil && s.corks == 0 { // corked: queued anyway, no clock read
		now = time.Now()
		last := s.lastWrite
		s.lastWrite = now
		if now.Sub(last) >= directGap {
			s.burst = 0
		}
		s.burst++
		if s.corks == 0 && s.queued == 0 && !s.writing && n <= maxDirect && s.burst <= directBurst && sh == nil {
			s.pushLocked(l, msg, nil, false)
			return s.writeQueuedDirect() // just msg: nothing else was queued
		}
	}
	if s.queued == 0 {
		if now.IsZero() {
			now = time.Now()
		}
		s.progress = now
	}
	if sh != nil {
		sh.Hold()
	}
	s.pushLocked(l, msg, sh, false)
	if s.corks == 0 || s.queued > maxDirect || sh != nil {
		s.cond.Signal()
	}
	s.mu.Unlock()
	return nil
}

// Cork holds back small messages until the matching Uncork: they are
// queued, and neither written by their writer nor handed to the writer
// goroutine, so that the messages a peer's read loop produces from one read
// (an agent's last update and its answer to a prompt) leave in one system
// call. Cork and Uncork come in pairs and nothing may wait between them
// (WaitRoom lets the writer go first).
func (s *Stream) Cork() {
	s.mu.Lock()
	s.corks++
	s.mu.Unlock()
}

// Flush wakes the writer for what is queued, corked or not: for a corker
// about to wait for something else.
func (s *Stream) Flush() {
	s.mu.Lock()
	if s.queued > 0 {
		s.cond.Signal()
	}
	s.mu.Unlock()
}

// Uncork undoes a Cork; the last one writes what was held back: itself
// when it fits a direct write, else by waking the writer.
func (s *Stream) Uncork() {
	s.mu.Lock()
	s.corks--
	if s.corks > 0 || s.queued == 0 || s.writing || s.err != nil {
		s.mu.Unlock()
		return
	}
	if s.direct == nil || s.queued > maxDirect {
		s.cond.Signal()
		s.mu.Unlock()
		return
	}
	s.writeQueuedDirect() // unlocks; a failure is the stream's (Err)
}

// writeQueuedDirect writes what is queued (a direct write's worth, taken
// as the writer takes it) with one system call as far as the pipe takes it
// without blocking, and queues the rest again, first, for the writer
// goroutine, which it wakes only when there is such a rest (a wake-up for
// nothing costs two thread switches on every direct write) or the close.
// Called with s.mu held, not writing; returns with it released, and the
// stream's failure.
func (s *Stream) writeQueuedDirect() error {
	batch := s.takeLocked(s.directBatch[:0])
	s.writing = true
	s.mu.Unlock()
	line := s.lineBuf[:0]
	for _, q := range batch {
		if s.log.IsTrace() {
			s.log.Trace("send", "message", truncate(q.msg, traceBytes))
		}
		line = append(append(line, q.msg...), '\n')
	}
	s.lineBuf = line
	written, err := tryWrite(s.direct, line)
	s.writtenBytes.Add(int64(written))
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writing = false
	s.progress = time.Now()
	if s.err == nil && err != nil {
		s.failLocked(fmt.Errorf("write: %w", err))
	}
	if s.err != nil {
		return s.err // the lanes are gone
	}
	s.room.Broadcast()
	left, first := written, len(batch) // batch[first:] was not (wholly) written
	for i, q := range batch {
		n := len(q.msg) + 1
		if left < n {
			first = i
			break
		}
		left -= n
		s.releaseLocked(q.l, n)
		if q.sh != nil {
			q.sh.Release()
		}
	}
	// Back at the front of their lanes, in order: the first unwritten one
	// (maybe partly written: only its rest) ends up first of all.
	for k := len(batch) - 1; k >= first; k-- {
		q := batch[k]
		n := len(q.msg) + 1
		q.l.taken -= n
		s.queued -= n
		msg := q.msg
		if k == first {
			msg = msg[min(left, len(msg)):] // maybe only the "\n" is left
		}
		s.pushLocked(q.l, msg, q.sh, true)
	}
	if len(s.ring) > 0 || s.closing {
		s.cond.Signal()
	}
	clear(batch)
	s.directBatch = batch[:0]
	return nil
}

// WriteRawLines is WriteRawLane of each of msgs in turn, as many as its
// lane has room for (LaneBytes; at least one) queued at once: a writer of
// many lines at a time (a history replay) takes the lock and wakes the
// writer once for all of them. It returns how many it queued; the caller
// waits for room (WaitRoom) before it writes the rest.
func (s *Stream) WriteRawLines(key string, msgs [][]byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.err != nil:
		return 0, s.err
	case s.closing:
		return 0, ErrClosed
	}
	l := s.laneLocked(key)
	room := s.opts.LaneBytes - l.bytes
	if s.lanes == nil {
		room = s.opts.QueueBytes - s.queued
	}
	if s.queued == 0 {
		s.progress = time.Now()
	}
	n := 0
	for _, msg := range msgs {
		if n > 0 && len(msg)+1 > room {
			break
		}
		s.pushLocked(l, msg, nil, false)
		room -= len(msg) + 1
		n++
	}
	s.cond.Signal()
	return n, nil
}

// AliasLane makes key's messages use the lane of to from now on ("" ends
// the alias). Without lanes it does nothing.
func (s *Stream) AliasLane(key, to string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lanes == nil || key == "" {
		return
	}
	if to == "" || to == key {
		delete(s.aliases, key)
		return
	}
	if s.aliases == nil {
		s.aliases = map[string]string{}
	}
	s.aliases[key] = to
}

// laneLocked returns the lane of session key, made if need be.
func (s *Stream) laneLocked(key string) *lane {
	if to, ok := s.aliases[key]; ok {
		key = to
	}
	if s.lanes == nil || key == "" {
		return s.shared
	}
	if l := s.lanes[key]; l != nil {
		return l
	}
	l := s.spare
	if l != nil {
		s.spare = nil
	} else {
		l = &lane{}
	}
	l.key = key
	s.lanes[key] = l
	return l
}

// pushLocked queues msg at the end of lane l, or at its front and with l
// first in the ring (the rest of a message a direct write began: nothing
// may come between). A lane that had nothing queued nor being written is
// served after the fresh lanes before it, ahead of the lanes with a
// backlog: its message waits for the batch being written, not for their
// turns. (One whose last batch is still being written goes to the back: it
// is a backlog that the writer happened to drain.)
func (s *Stream) pushLocked(l *lane, msg []byte, sh *Shared, front bool) {
	n := len(msg) + 1
	l.bytes += n
	s.queued += n
	q := queued{msg: msg, sh: sh}
	switch {
	case !front:
		l.msgs = append(l.msgs, q)
	case l.head > 0:
		l.head--
		l.msgs[l.head] = q
	default:
		l.msgs = slices.Insert(l.msgs, 0, q)
	}
	switch {
	case front:
		if i := slices.Index(s.ring, l); i >= 0 {
			s.ring = slices.Delete(s.ring, i, i+1)
			if i < s.fresh {
				s.fresh--
			}
		}
		s.ring = slices.Insert(s.ring, 0, l)
		s.fresh++
	case l.ringed:
	case l.taken > 0:
		s.ring = append(s.ring, l)
	default:
		s.ring = slices.Insert(s.ring, s.fresh, l)
		s.fresh++
	}
	l.ringed = true
}

// takeLocked moves queued messages into batch, up to maxBatch bytes (at
// least one message), serving the lanes in turn: each lane of the ring,
// once at most, gives what fits; one that keeps messages goes to the back.
func (s *Stream) takeLocked(batch []queued) []queued {
	size := 0
	for turns := len(s.ring); turns > 0; turns-- {
		l := s.ring[0]
		if size > 0 && size+len(l.msgs[l.head].msg) >= maxBatch {
			break // its turn starts the next batch
		}
		s.fresh = max(s.fresh-1, 0)
		for !l.empty() && (size == 0 || size+len(l.msgs[l.head].msg) < maxBatch) {
			q := l.msgs[l.head]
			msg := q.msg
			l.msgs[l.head] = queued{}
			l.head++
			q.l = l
			batch = append(batch, q)
			size += len(msg) + 1
			l.bytes -= len(msg) + 1
			l.taken += len(msg) + 1
		}
		copy(s.ring, s.ring[1:])
		if !l.empty() { // the batch is full
			s.ring[len(s.ring)-1] = l
			break
		}
		s.ring[len(s.ring)-1] = nil
		s.ring = s.ring[:len(s.ring)-1]
		l.msgs, l.head, l.ringed = l.msgs[:0], 0, false
	}
	return batch
}

// queued is a message queued, and once taken for writing, its lane; sh
// is its pooled buffer, held until it is written (WriteRawShared).
type queued struct {
	msg []byte
	l   *lane
	sh  *Shared
}

// releaseLocked frees the room of n bytes of lane l that were written.
func (s *Stream) releaseLocked(l *lane, n int) {
	l.taken -= n
	s.queued -= n
	s.dropLocked(l)
}

// dropLocked forgets session lane l if it holds nothing.
func (s *Stream) dropLocked(l *lane) {
	if l.bytes == 0 && l.taken == 0 && !l.ringed && l != s.shared {
		delete(s.lanes, l.key)
		l.key = ""
		s.spare = l
	}
}

// LaneOf is the lane of an encoded message we write: the session its
// params name (a request or a notification); for a response, the session
// the request it answers named (remembered when the request was read), else
// the one its result names (session/new: the answer goes before the new
// session's updates); for a $/cancel_request, the lane of the request it
// withdraws (so that it cannot overtake it); else the shared lane, "". On
// the editor's stream every sessionId is a router session id.
func (s *Stream) LaneOf(msg []byte) string {
	var f [4]json.RawMessage
	if MembersOfValid(msg, laneMembers, f[:]) != nil {
		return ""
	}
	id, method, params, result := f[0], f[1], f[2], f[3]
	if method == nil {
		if key, ok := s.takeLane(s.answerLanes, id); ok {
			return key
		}
		return SessionID(result)
	}
	key := SessionID(params)
	switch {
	case key != "" && len(id) > 0:
		s.putLane(s.callLanes, id, key)
	case key == "" && string(method) == `"`+MethodCancelRequest+`"`:
		var r [1]json.RawMessage
		if MembersOfValid(params, requestIDMembers, r[:]) == nil && r[0] != nil {
			s.idMu.Lock()
			key = s.callLanes[IDKey(r[0])] // the answer is still to come
			s.idMu.Unlock()
		}
	}
	return key
}

var (
	laneMembers      = []string{"id", "method", "params", "result"}
	sessionMembers   = []string{"sessionId"}
	requestIDMembers = []string{"requestId"}
)

// SessionID returns the string member sessionId of the valid JSON object
// obj (params or a result), or "", without decoding the rest: the key of
// the session's lane.
func SessionID(obj json.RawMessage) string {
	if len(obj) == 0 {
		return ""
	}
	var f [1]json.RawMessage
	if MembersOfValid(obj, sessionMembers, f[:]) != nil || len(f[0]) < 2 || f[0][0] != '"' {
		return ""
	}
	raw := f[0]
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1])
	}
	var id string
	json.Unmarshal(raw, &id)
	return id
}

// putLane remembers the lane of request id in m (a lane map), within
// maxLaneIDs.
func (s *Stream) putLane(m map[string]string, id json.RawMessage, key string) {
	if m == nil || len(id) == 0 {
		return
	}
	s.idMu.Lock()
	defer s.idMu.Unlock()
	if len(m) >= maxLaneIDs {
		if s.lost++; s.lost == 1 {
			s.log.Warn("too many requests pending to remember their lanes", "limit", maxLaneIDs)
		}
		return
	}
	m[IDKey(id)] = key
}

// takeLane returns and forgets the lane of request id in m.
func (s *Stream) takeLane(m map[string]string, id json.RawMessage) (string, bool) {
	if m == nil || len(id) == 0 {
		return "", false
	}
	k := IDKey(id)
	s.idMu.Lock()
	defer s.idMu.Unlock()
	key, ok := m[k]
	delete(m, k)
	return key, ok
}

// WaitRoom waits until the lane of session key ("": the shared lane) has
// less than LaneBytes queued (not counting what the writer is writing) and
// the whole queue less than QueueBytes (without lanes: until the queue
// holds less than QueueBytes). Producers that can
// flood the peer call it after each message, holding no lock: only their
// own lane's backlog holds them back, and the hard cap only when many
// lanes are full at once. It returns the stream's failure, or ErrClosed
// once it is closing, instead of waiting.
func (s *Stream) WaitRoom(key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		switch {
		case s.err != nil:
			return s.err
		case s.closing:
			return ErrClosed
		case s.queued < s.opts.QueueBytes && (s.lanes == nil || s.laneBytesLocked(key) < s.opts.LaneBytes):
			return nil
		}
		if s.corks > 0 {
			s.cond.Signal() // what a Cork holds back must not be waited for
		}
		s.room.Wait()
	}
}

func (s *Stream) laneBytesLocked(key string) int {
	if to, ok := s.aliases[key]; ok {
		key = to
	}
	if key == "" {
		return s.shared.bytes
	}
	if l := s.lanes[key]; l != nil {
		return l.bytes
	}
	return 0
}

func (s *Stream) writeLoop() {
	defer close(s.done)
	bw := bufio.NewWriterSize(progressWriter{s}, 64<<10)
	var batch []queued
	for {
		s.mu.Lock()
		for s.err == nil && (s.writing || len(s.ring) == 0 && !s.closing) {
			s.cond.Wait()
		}
		if s.err != nil || len(s.ring) == 0 {
			s.mu.Unlock()
			s.w.Close()
			return
		}
		batch = s.takeLocked(batch)
		s.writing = true
		// What was taken no longer weighs on its lane: a producer waiting
		// for room reads its next message while the batch is written.
		s.room.Broadcast()
		s.mu.Unlock()

		var err error
		for _, q := range batch {
			if s.log.IsTrace() {
				s.log.Trace("send", "message", truncate(q.msg, traceBytes))
			}
			if _, err = bw.Write(q.msg); err == nil {
				err = bw.WriteByte('\n')
			}
			if err != nil {
				break
			}
		}
		if err == nil {
			err = bw.Flush()
		}
		s.mu.Lock()
		s.writing = false
		if s.err == nil { // else the lanes are gone
			for _, q := range batch {
				s.releaseLocked(q.l, len(q.msg)+1)
			}
		}
		for _, q := range batch {
			if q.sh != nil {
				q.sh.Release()
			}
		}
		s.room.Broadcast()
		s.mu.Unlock()
		clear(batch)
		batch = batch[:0]
		if err != nil {
			s.fail(fmt.Errorf("write: %w", err))
		}
	}
}

// progressWriter writes in slices so that the watchdog sees progress on a
// large message that the peer is still reading.
type progressWriter struct{ s *Stream }

func (p progressWriter) Write(b []byte) (int, error) {
	// One page: a pipe frees room a page at a time and a write returns only
	// when all of it is in, so with 64 KiB slices a peer reading 4 KiB every
	// StallTimeout/10 would be declared hung.
	// Without a stall timeout nobody watches progress: one write.
	slice := len(b)
	if p.s.opts.StallTimeout > 0 {
		slice = 4 << 10
	}
	written := 0
	for len(b) > 0 {
		n := min(len(b), slice)
		m, err := p.s.w.Write(b[:n])
		written += m
		p.s.writtenBytes.Add(int64(m))
		p.s.mu.Lock()
		p.s.progress = time.Now()
		p.s.mu.Unlock()
		if err != nil {
			return written, err
		}
		b = b[n:]
	}
	return written, nil
}

func (s *Stream) watchdog() {
	tick := max(s.opts.StallTimeout/4, 10*time.Millisecond)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		s.mu.Lock()
		stalled := s.queued > 0 && time.Since(s.progress) > s.opts.StallTimeout
		s.mu.Unlock()
		if stalled {
			s.fail(fmt.Errorf("%w for %s", ErrStalled, s.opts.StallTimeout))
			return
		}
	}
}

func (s *Stream) fail(err error) {
	s.mu.Lock()
	s.failLocked(err)
	s.mu.Unlock()
}

// failLocked records the first write-side failure, drops what is queued and
// unblocks the writer (closing w interrupts a write stuck in a pipe).
func (s *Stream) failLocked(err error) {
	if s.err != nil {
		return
	}
	s.err = err
	s.shared, s.ring, s.fresh, s.queued = &lane{}, nil, 0, 0
	if s.lanes != nil {
		s.lanes = map[string]*lane{}
	}
	s.cond.Broadcast()
	s.room.Broadcast()
	// Not under s.mu: closing w waits for a write in progress, which
	// takes s.mu to note its progress.
	s.owned.Go(func() { s.w.Close() })
	if s.opts.OnFail != nil {
		s.failOnce.Do(func() { s.owned.Go(func() { s.opts.OnFail(err) }) })
	}
}

// noteReadErr keeps a read error that is not an orderly end.
func (s *Stream) noteReadErr(err error) {
	if errors.Is(err, io.EOF) || errors.Is(err, os.ErrClosed) || errors.Is(err, io.ErrClosedPipe) {
		return
	}
	s.mu.Lock()
	closing := s.closing
	s.mu.Unlock()
	if !closing {
		s.readErr.CompareAndSwap(nil, readError{err})
	}
}

// readError boxes an error for atomic.Value (one concrete type).
type readError struct{ error }

// ReadErr is why reading from the peer ended, when it was not an orderly
// end (the peer closing its side, or Close): the stream broke.
func (s *Stream) ReadErr() error {
	if e, ok := s.readErr.Load().(readError); ok {
		return e.error
	}
	return nil
}

// Err returns the write-side failure, if any.
func (s *Stream) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close implements jsonrpc2.ObjectStream. It stops reading, lets the writer
// drain what is already queued (bounded by the stall timeout when one is
// set) and then closes the write side.
func (s *Stream) Close() error {
	s.mu.Lock()
	s.closing = true
	s.cond.Broadcast()
	s.room.Broadcast()
	s.mu.Unlock()
	return s.rc.Close()
}

// CloseWrite ends the write side only: no new writes, the writer drains
// what is queued and then closes w, and reading goes on until the peer
// closes its side or Close. A process told to go away by the end of its
// stdin may still write while it exits; with its output still read, it
// does not die of SIGPIPE halfway through its last words.
func (s *Stream) CloseWrite() {
	s.mu.Lock()
	s.closing = true
	s.cond.Broadcast()
	s.room.Broadcast()
	s.mu.Unlock()
}

// Abort drops everything queued and closes both sides at once.
func (s *Stream) Abort(err error) {
	s.fail(err)
	s.rc.Close()
}

// Done is closed when the write side has finished (drained and closed, or
// failed).
func (s *Stream) Done() <-chan struct{} { return s.done }

// Wait waits until every goroutine the stream started has ended (the
// writer, the stall watchdog, OnFail), or d passed; it returns how many
// still run. The writer ends once Close (or CloseWrite) let it drain what
// was queued, or at once on Abort: an owner that stops waiting for a peer
// to read aborts the stream, then waits.
func (s *Stream) Wait(d time.Duration) int { return s.owned.Wait(d) }

// Written is the number of bytes written so far (for tests and metrics).
func (s *Stream) Written() int64 { return s.writtenBytes.Load() }

// Queued is how many bytes wait in the write queue or are being written
// ("\n" included): read by the telemetry's queue-depth gauge at each
// metric export, not on the write path.
func (s *Stream) Queued() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queued
}
