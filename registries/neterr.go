package registries

import (
	"errors"
	"net"
	"net/url"
)

// NetReason describes a transport error without the URL (which may hold
// credentials, in its user info or a token in its query; net/http redacts
// only the password, and this keeps messages short): "timeout" for a
// timeout, else the underlying error.
func NetReason(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	return err.Error()
}
