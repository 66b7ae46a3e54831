// Package logging builds the process logger of cri-guard's binaries (the
// daemon and the taint controller), so that both write the same format:
// logrus, text or JSON, millisecond timestamps. It imports nothing of the
// project.
package logging

import (
	"fmt"
	"io"

	"github.com/sirupsen/logrus"
)

// New builds the process logger; components get Entries with a component
// field from it.
func New(level, format string, out io.Writer) (*logrus.Logger, error) {
	l := logrus.New()
	l.SetOutput(out)
	lvl, err := logrus.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("log level %q: %w", level, err)
	}
	l.SetLevel(lvl)
	switch format {
	case "text":
		l.SetFormatter(&logrus.TextFormatter{FullTimestamp: true, TimestampFormat: "2006-01-02T15:04:05.000Z07:00"})
	case "json":
		l.SetFormatter(&logrus.JSONFormatter{TimestampFormat: "2006-01-02T15:04:05.000Z07:00"})
	default:
		return nil, fmt.Errorf("log format %q: want text or json", format)
	}
	return l, nil
}
