package remote

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/acp-router/acp-router/acp"
)

// LineConn is a Conn on newline-delimited JSON-RPC (the stdio editor of a
// router that also listens: one hub client among the remote ones). A line
// that is not JSON is answered -32700, a batch or a scalar -32600, a line
// over the limit -32600, all with id null, and the stream goes on
// (DESIGN §7); empty lines are skipped.
type LineConn struct {
	r       *bufio.Reader
	w       io.Writer
	max     int
	timeout time.Duration
	wmu     sync.Mutex
	closer  func() error
	once    sync.Once
}

// NewLineConn reads in and writes out; max bounds a line (default
// acp.DefaultMaxLine as the server's), writeTimeout a write when out has
// deadlines (a pipe the runtime polls; 0: DefaultWriteTimeout, negative:
// none, for the stdio editor, which may take its time as it always
// could); close, when set, is called by Close.
func NewLineConn(in io.Reader, out io.Writer, max int, writeTimeout time.Duration, close func() error) *LineConn {
	if max <= 0 {
		max = acp.DefaultMaxLine
	}
	if writeTimeout == 0 {
		writeTimeout = DefaultWriteTimeout
	}
	return &LineConn{r: bufio.NewReaderSize(in, 64<<10), w: out, max: max, timeout: writeTimeout, closer: close}
}

func (c *LineConn) Read(ctx context.Context) ([]byte, error) {
	for {
		line, err := c.line()
		if errors.Is(err, errLineTooLong) {
			c.Write(ctx, protocolError(codeInvalidRequest, "message exceeds the "+strconv.Itoa(c.max)+"-byte limit"))
			continue
		}
		if msg := bytes.TrimSpace(line); len(msg) > 0 {
			switch classify(msg) {
			case kindObject:
				return msg, nil
			case kindInvalid:
				c.Write(ctx, protocolError(codeParse, "Parse error"))
			case kindBatch:
				c.Write(ctx, protocolError(codeInvalidRequest, "JSON-RPC batches are not supported"))
			default:
				c.Write(ctx, protocolError(codeInvalidRequest, "Invalid Request"))
			}
		}
		if err != nil {
			return nil, io.EOF
		}
	}
}

var errLineTooLong = errors.New("line too long")

// line is the next line; a line over max is skipped whole.
func (c *LineConn) line() ([]byte, error) {
	var line []byte
	over := false
	for {
		chunk, err := c.r.ReadSlice('\n')
		if !over {
			if len(line)+len(chunk) > c.max+1 {
				over, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if over {
			if err != nil {
				return nil, err
			}
			return nil, errLineTooLong
		}
		return line, err
	}
}

type writeDeadliner interface{ SetWriteDeadline(time.Time) error }

func (c *LineConn) Write(ctx context.Context, msg []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if d, ok := c.w.(writeDeadliner); ok && c.timeout > 0 {
		d.SetWriteDeadline(time.Now().Add(c.timeout))
	}
	if _, err := c.w.Write(append(msg[:len(msg):len(msg)], '\n')); err != nil {
		return err
	}
	return nil
}

func (c *LineConn) Close(reason error) error {
	var err error
	c.once.Do(func() {
		if c.closer != nil {
			err = c.closer()
		}
	})
	return err
}
