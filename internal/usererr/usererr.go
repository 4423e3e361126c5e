package usererr

import (
	"errors"
	"reflect"
	"runtime/debug"
)

// IsNil reports whether v is nil, or an interface holding a nil pointer,
// map, func, slice, channel or interface: a value whose methods may
// dereference the nil.
func IsNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Func, reflect.Slice, reflect.Chan, reflect.Interface:
		return rv.IsNil()
	}
	return false
}

// errWalk is what Panics compares err's chain with: no error is it, so
// errors.Is walks the whole chain, every Unwrap and Is called.
var errWalk = errors.New("usererr: walk")

// Panics calls err's Error and walks its chain (errors.Is: every Unwrap
// and Is method) in a recover, and returns what they panicked with and
// the stack of the panic; nil and nil when they did not. err must not be
// nil; a typed nil is for IsNil first.
func Panics(err error) (panicked any, stack []byte) {
	defer func() {
		if v := recover(); v != nil {
			panicked, stack = v, debug.Stack()
		}
	}()
	_ = err.Error()
	_ = errors.Is(err, errWalk)
	return nil, nil
}
