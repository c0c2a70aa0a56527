package fusefs

import "sync"

// Kin: the nodes one name has had since a writer split it (split, in
// passthrough.go). The kernel keeps each node's attributes apart, so a
// change made through one (a truncate through a descriptor of the old
// node, a write of the new one's writer) would not show in a stat of
// another until the attribute timeout ran out: a task that truncated
// through an old descriptor and then stat'ed the name saw the size of
// before. So while a name has more than one node the kernel knows:
//   - every attribute answer of each of them is volatile (not cached, see
//     volatile.go);
//   - the old node's cached attributes are dropped at the split, and a
//     write or attribute change through one drops the others' (a
//     readdirplus answer still lets the kernel keep one for a jiffy);
//   - a node that a lookup makes for the name later (the kernel may forget
//     the split's new node before it looks the name up again) joins them.
//
// A node leaves its kin when the kernel forgets it, and a kin goes with
// its last node. Kins are found by the name's path at the split: a node
// made for that path after a rename joins one it has nothing to do with,
// which costs it only the caching of its attributes while the kin lives.
type kin struct {
	key   string             // the path it is registered under (kins.byPath)
	nodes map[*node]struct{} // guarded by kins.mu
}

// kins is a mount's kins (session.kins).
type kins struct {
	mu     sync.Mutex      // guards byPath and every kin's nodes; taken before node.mu
	byPath map[string]*kin // kins with a node, by path
}

// join puts nodes into the kin of path (made if none), merging a kin one
// of them was in already.
func (ks *kins) join(path string, nodes ...*node) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if ks.byPath == nil {
		ks.byPath = map[string]*kin{}
	}
	k := ks.byPath[path]
	if k == nil {
		k = &kin{key: path, nodes: map[*node]struct{}{}}
		ks.byPath[path] = k
	}
	for _, x := range nodes {
		x.mu.Lock()
		old := x.kin
		x.kin = k
		x.mu.Unlock()
		if old != nil && old != k {
			for o := range old.nodes {
				o.mu.Lock()
				o.kin = k
				o.mu.Unlock()
				k.nodes[o] = struct{}{}
			}
			if ks.byPath[old.key] == old {
				delete(ks.byPath, old.key)
			}
		}
		k.nodes[x] = struct{}{}
	}
}

// has reports whether path has a kin.
func (ks *kins) has(path string) bool {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	return ks.byPath[path] != nil
}

// others returns the nodes of n's kin other than n.
func (ks *kins) others(n *node) []*node {
	n.mu.Lock()
	k := n.kin
	n.mu.Unlock()
	if k == nil {
		return nil
	}
	ks.mu.Lock()
	defer ks.mu.Unlock()
	out := make([]*node, 0, len(k.nodes))
	for o := range k.nodes {
		if o != n {
			out = append(out, o)
		}
	}
	return out
}

// leave drops n from its kin, and the kin when no node is left (while
// one is, a node made for the path joins it: the kernel may forget the
// split's new node before it looks the name up again).
func (ks *kins) leave(n *node) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	n.mu.Lock()
	k := n.kin
	n.kin = nil
	n.mu.Unlock()
	if k == nil {
		return
	}
	delete(k.nodes, n)
	if len(k.nodes) == 0 && ks.byPath[k.key] == k {
		delete(ks.byPath, k.key)
	}
}

// hasLiveKin reports whether another node of n's name is still known to
// the kernel: n's attributes must then not be cached.
func (n *node) hasLiveKin() bool {
	n.mu.Lock()
	k := n.kin
	n.mu.Unlock()
	if k == nil {
		return false // every node but a split one: no lock, nothing allocated
	}
	ks := &n.s.kins
	ks.mu.Lock()
	defer ks.mu.Unlock()
	_, in := k.nodes[n]
	return len(k.nodes) > 1 || len(k.nodes) == 1 && !in
}

// notifyKin drops the attributes the kernel cached for n's kin, after a
// change made through n.
func (n *node) notifyKin() {
	for _, o := range n.s.kins.others(n) {
		o.NotifyContent(-1, 0) // offset -1: the attributes, not the pages
	}
}

// OnForget drops n from its kin: the kernel no longer knows it.
func (n *node) OnForget() { n.s.kins.leave(n) }
