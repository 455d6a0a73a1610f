package main

import (
	"errors"
	"fmt"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/routelet/routelet/pkg/ipam"
)

// codeStatusNotReady is the STATUS error code for "plugin not available".
const codeStatusNotReady = types.ErrPluginNotAvailable

// cniErr builds a CNI error with a formatted message.
func cniErr(code uint, format string, args ...any) *types.Error {
	return types.NewError(code, fmt.Sprintf(format, args...), "")
}

// ipamErr maps an allocation failure to a CNI error: a busy lock, an exhausted
// block or a requested address held by someone else can clear up, so the
// runtime is told to try again later; anything else is internal. what says
// what was being allocated or released; the IPAM's own errors already start
// with "ipam:", so they are not prefixed again.
func ipamErr(what string, err error) *types.Error {
	var lt *ipam.LockTimeoutError
	var ex *ipam.ExhaustedError
	switch {
	case errors.As(err, &ex):
		return cniErr(types.ErrTryAgainLater, "%s: %v", what, ex)
	case errors.As(err, &lt), errors.Is(err, ipam.ErrInUse):
		return cniErr(types.ErrTryAgainLater, "%s: %v", what, err)
	default:
		return cniErr(types.ErrInternal, "%s: %v", what, err)
	}
}

// asCNIErr keeps a *types.Error as is and turns anything else into an
// internal error with context.
func asCNIErr(context string, err error) *types.Error {
	var te *types.Error
	if errors.As(err, &te) {
		return te
	}
	return cniErr(types.ErrInternal, "%s: %v", context, err)
}
