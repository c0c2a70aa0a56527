package fusefs

import "testing"

// TestKins: nodes split from one name are kin while the kernel knows more
// than one of them; a node made for the path later joins the kin while
// any of it lives; the kin goes with its last node.
func TestKins(t *testing.T) {
	type step struct {
		do      func(s *session, n []*node)
		live    []bool // hasLiveKin of n[0..]
		hasPath bool   // the path still has a kin
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"split, then the old node forgotten", []step{
			{func(s *session, n []*node) { s.kins.join("p", n[0], n[1]) }, []bool{true, true, false}, true},
			{func(s *session, n []*node) { n[0].OnForget() }, []bool{false, false, false}, true},
			{func(s *session, n []*node) { n[1].OnForget() }, []bool{false, false, false}, false},
		}},
		{"the new node forgotten before a lookup made another", []step{
			{func(s *session, n []*node) { s.kins.join("p", n[0], n[1]) }, []bool{true, true, false}, true},
			{func(s *session, n []*node) { n[1].OnForget() }, []bool{false, false, false}, true},
			{func(s *session, n []*node) { s.kins.join("p", n[2]) }, []bool{true, false, true}, true},
			{func(s *session, n []*node) { n[0].OnForget(); n[2].OnForget() }, []bool{false, false, false}, false},
		}},
		{"a node split twice merges its kins", []step{
			{func(s *session, n []*node) { s.kins.join("p", n[0], n[1]) }, []bool{true, true, false}, true},
			{func(s *session, n []*node) { s.kins.join("q", n[1], n[2]) }, []bool{true, true, true}, true},
			{func(s *session, n []*node) { n[1].OnForget() }, []bool{true, false, true}, true},
		}},
		{"forgetting a node without kin", []step{
			{func(s *session, n []*node) { n[0].OnForget() }, []bool{false, false, false}, false},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSession()
			n := []*node{{s: s}, {s: s}, {s: s}}
			for i, st := range tt.steps {
				st.do(s, n)
				for j, want := range st.live {
					if got := n[j].hasLiveKin(); got != want {
						t.Errorf("step %d: node %d hasLiveKin %v, want %v", i, j, got, want)
					}
				}
				if got := s.kins.has("p") || s.kins.has("q"); got != st.hasPath {
					t.Errorf("step %d: a kin registered %v, want %v", i, got, st.hasPath)
				}
			}
		})
	}
}
