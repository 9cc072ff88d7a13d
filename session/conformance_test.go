package session_test

import (
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/session/sessiontest"
)

func TestLocalConformance(t *testing.T) {
	sessiontest.Test(t, func(t *testing.T, g *graph.Graph) *session.Session {
		s, err := session.New(g)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestMasterConformance(t *testing.T) {
	sessiontest.Test(t, func(t *testing.T, g *graph.Graph) *session.Session {
		s, err := session.New(g, session.WithMaster(newMaster(), nil))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
