package webhookinbox

import (
	"io"
	"net/http"
	"strings"
)

// MaxBody bounds a delivery's body (10 MiB); a larger one is answered 413.
const MaxBody = 10 << 20

// HTTP is a net/http handler for POST /…/{provider}: the provider is the
// last segment of the path unless provider names one. chi mounts it as it
// is, echo with echo.WrapHandler, gin with gin.WrapH.
func (h *Handler[T]) HTTP(work Work[T], provider string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		// The raw bytes, before anything parses them: the signature covers
		// exactly those. A declared length over the bound is refused unread.
		if r.ContentLength > MaxBody {
			write(w, TooLarge())
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
		if err != nil {
			write(w, TooLarge())
			return
		}
		name := provider
		if name == "" {
			name = r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
		}
		write(w, h.Handle(r.Context(), name, r.Header, body, r.URL.RequestURI(), work))
	})
}

func write(w http.ResponseWriter, a Answer) {
	for k, v := range a.Headers {
		w.Header().Set(k, v)
	}
	w.Header().Set("Content-Type", a.ContentType)
	w.WriteHeader(a.Status)
	_, _ = io.WriteString(w, a.Body)
}
