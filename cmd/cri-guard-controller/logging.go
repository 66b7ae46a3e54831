package main

import (
	"fmt"
	"io"

	"github.com/sirupsen/logrus"
)

// newLogger builds the process logger as the daemon does; components get
// Entries with a component field from it.
func newLogger(level, format string, out io.Writer) (*logrus.Logger, error) {
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
