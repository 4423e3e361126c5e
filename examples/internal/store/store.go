package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/drainkit/drainkit/internal/durable"
)

// magic starts every record file; the header line is "drainkit-record/1 LENGTH SHA256".
const magic = "drainkit-record/1"

const (
	recordExt = ".rec"
	tempExt   = durable.TempSuffix
)

// A Record is one paused sandbox as the server needs it to resume the sandbox later.
type Record struct {
	ID       string    `json:"id"`
	State    string    `json:"state"`           // "paused"
	Runtime  string    `json:"runtime"`         // "fake" or "runsc"
	Image    string    `json:"image,omitempty"` // where the runtime put the sandbox's state
	TimeoutS int       `json:"timeout_s"`       // the sandbox's timeout, restarted on resume
	PausedAt time.Time `json:"paused_at,omitzero"`
}

// A Problem is a file in the directory that is not a good record.
type Problem struct {
	Path string `json:"path"`
	// Incomplete is true for a temporary file left by a Put that never finished (the
	// process died before its rename); false for a record file that fails its checks.
	Incomplete bool   `json:"incomplete"`
	Err        string `json:"error"`
}

// A Store is a directory of records, one file per sandbox. Its methods are safe for
// concurrent use on different IDs; Puts of the same ID must not overlap.
type Store struct {
	dir string
}

// Open returns the store in dir, creating the directory if needed.
func Open(dir string) (*Store, error) {
	if dir == "" {
		return nil, errors.New("store: dir is required")
	}
	// Durably: a record made durable in a directory whose own entry a crash
	// undoes is lost with it.
	if err := durable.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	return &Store{dir: dir}, nil
}

// Dir returns the store's directory.
func (s *Store) Dir() string { return s.dir }

// validID keeps record names inside the directory.
func validID(id string) error {
	if id == "" || strings.ContainsAny(id, `/\`) || id[0] == '.' {
		return fmt.Errorf("store: invalid record id %q", id)
	}
	return nil
}

// Put writes r durably, replacing any record with its ID, with durable.WriteFile: a
// crash before it returns leaves the old record, and perhaps the write's temporary file,
// which Load reports as Incomplete.
func (s *Store) Put(r Record) error {
	if err := validID(r.ID); err != nil {
		return err
	}
	data, err := Encode(r)
	if err != nil {
		return err
	}
	if err := durable.WriteFile(s.path(r.ID), data, 0o600); err != nil {
		return fmt.Errorf("store: put %s: %w", r.ID, err)
	}
	return nil
}

// Delete removes the record of id durably. A missing record is not an error.
func (s *Store) Delete(id string) error {
	if err := validID(id); err != nil {
		return err
	}
	err := os.Remove(s.path(id))
	if err == nil || errors.Is(err, os.ErrNotExist) {
		err = durable.SyncDir(s.dir)
	}
	if err != nil {
		return fmt.Errorf("store: delete %s: %w", id, err)
	}
	return nil
}

// Load reads every record, sorted by ID, and reports every other file that looks like
// one: temporary files of unfinished Puts and record files that fail their checks
// (truncated, wrong length or checksum, bad JSON, ID not matching the file name).
// Problem files are left in place for an operator to look at. The error is for a
// directory that cannot be read at all.
func (s *Store) Load() ([]Record, []Problem, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, nil, fmt.Errorf("store: %w", err)
	}
	var recs []Record
	var problems []Problem
	for _, e := range entries {
		name := e.Name()
		path := filepath.Join(s.dir, name)
		switch {
		case strings.HasSuffix(name, tempExt):
			problems = append(problems, Problem{Path: path, Incomplete: true,
				Err: "temporary file of a write that never finished"})
		case strings.HasSuffix(name, recordExt):
			r, err := s.read(path, strings.TrimSuffix(name, recordExt))
			if err != nil {
				problems = append(problems, Problem{Path: path, Err: err.Error()})
				continue
			}
			recs = append(recs, r)
		}
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].ID < recs[j].ID })
	return recs, problems, nil
}

// MaxRecordSize bounds a record file: a server's record is a few hundred bytes; a
// larger file is not read into memory.
const MaxRecordSize = 1 << 20

// read reads one record file without ever blocking or following a link: opened
// non-blocking (a FIFO would hang a blocking open), it must be a regular file of at most
// MaxRecordSize bytes.
func (s *Store) read(path, id string) (Record, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|openFlags, 0)
	if err != nil {
		return Record{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		return Record{}, err
	case !fi.Mode().IsRegular():
		return Record{}, fmt.Errorf("not a regular file (%v)", fi.Mode().Type())
	case fi.Size() > MaxRecordSize:
		return Record{}, fmt.Errorf("%d bytes, larger than the %d a record may have", fi.Size(), MaxRecordSize)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxRecordSize+1))
	if err != nil {
		return Record{}, err
	}
	if len(data) > MaxRecordSize {
		return Record{}, fmt.Errorf("larger than the %d bytes a record may have", MaxRecordSize)
	}
	r, err := Decode(data)
	if err != nil {
		return Record{}, err
	}
	if r.ID != id {
		return Record{}, fmt.Errorf("record id %q does not match its file name", r.ID)
	}
	return r, nil
}

func (s *Store) path(id string) string { return filepath.Join(s.dir, id+recordExt) }

// Encode returns r as a record file: a header line with the payload's length and SHA-256,
// then the JSON payload.
func Encode(r Record) ([]byte, error) {
	payload, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	sum := sha256.Sum256(payload)
	header := fmt.Sprintf("%s %d %s\n", magic, len(payload), hex.EncodeToString(sum[:]))
	return append([]byte(header), payload...), nil
}

// Decode parses a record file and checks its header, length, checksum and JSON.
func Decode(data []byte) (Record, error) {
	var r Record
	header, payload, ok := bytes.Cut(data, []byte("\n"))
	if !ok {
		return r, errors.New("no header line (truncated)")
	}
	fields := strings.Fields(string(header))
	if len(fields) != 3 || fields[0] != magic {
		return r, fmt.Errorf("bad header %q", header)
	}
	n, err := strconv.Atoi(fields[1])
	if err != nil || n != len(payload) {
		return r, fmt.Errorf("payload is %d bytes, header says %s (truncated or extended)", len(payload), fields[1])
	}
	sum := sha256.Sum256(payload)
	if hex.EncodeToString(sum[:]) != fields[2] {
		return r, errors.New("checksum mismatch")
	}
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return r, fmt.Errorf("bad payload: %w", err)
	}
	if err := validID(r.ID); err != nil {
		return r, err
	}
	return r, nil
}
