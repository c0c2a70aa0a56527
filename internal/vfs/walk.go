package vfs

import (
	"sort"

	"github.com/ferry-fs/ferry/internal/cache/meta"
)

// The order directory readahead (fileahead.go) predicts in: the regular
// files of a tree in find order, depth first, each directory's names
// sorted as readdir returns them (and as `ls`, a shell glob and a sorted
// key listing give them), or in natural order (meta.NaturalLess: "c2"
// before "c10", as a loop over chunk numbers opens them). It walks cached
// listings only: a directory
// whose listing is not cached ends the walk (the caller may list it in
// the background), and so does one of more than faMaxEntries names.

// walkPos is a position in the walk: the name in the directory dir
// ("" = before its first name).
type walkPos struct {
	dir  Loc
	name string
}

func posOf(l Loc) walkPos {
	dir, name := l.parent()
	return walkPos{dir: dir, name: name}
}

func (p walkPos) loc() Loc { return p.dir.child(p.name) }

// walkStep is what nextFile found.
type walkStep int

const (
	walkFile   walkStep = iota // the next regular file
	walkEnd                    // no file after pos within the steps (or the tree's end)
	walkUnlist                 // a directory on the way is not listed (need)
)

// nextFile returns the first regular file after pos in the walk, each
// directory's names in natural order when nat (files written through
// this mount and not listed since left out), looking
// at no more than *steps names (it decrements *steps). A directory on
// the way whose listing is not cached stops it with walkUnlist and that
// directory. It climbs out of a directory at its end only into a parent
// whose listing is cached (a walker listed it) and never above the
// bucket.
func (fs *FS) nextFile(pos walkPos, steps *int, nat bool) (walkPos, meta.DirEntry, walkStep, Loc) {
	dir, after := pos.dir, pos.name
	for {
		ls, ok := fs.listedForWalk(dir)
		if !ok {
			return walkPos{}, meta.DirEntry{}, walkUnlist, dir
		}
		var names []string
		var i int
		if nat {
			names = ls.NaturalNames()
			i = sort.Search(len(names), func(k int) bool { return !meta.NaturalLess(names[k], after) })
		} else {
			names = ls.Names()
			i = sort.SearchStrings(names, after)
		}
		if i < len(names) && names[i] == after && after != "" {
			i++
		}
		descended := false
		for ; i < len(names); i++ {
			if *steps <= 0 {
				return walkPos{}, meta.DirEntry{}, walkEnd, Loc{}
			}
			*steps--
			e, ok := ls.Has(names[i])
			if !ok || hiddenName(e.Name) {
				continue
			}
			switch e.Kind {
			case meta.KindFile:
				at := walkPos{dir: dir, name: e.Name}
				if !fs.listedClean(at, e) {
					continue // written through this mount: not what a reader walks
				}
				return at, e, walkFile, Loc{}
			case meta.KindDir:
				child := dir.child(e.Name)
				if _, ok := fs.listedForWalk(child); !ok {
					return walkPos{}, meta.DirEntry{}, walkUnlist, child
				}
				dir, after, descended = child, "", true
			}
			if descended {
				break
			}
		}
		if descended {
			continue
		}
		// The end of dir: on with the name after it in its parent.
		if dir.Key == "" {
			return walkPos{}, meta.DirEntry{}, walkEnd, Loc{}
		}
		par, name := dir.parent()
		if _, ok := fs.listedForWalk(par); !ok {
			return walkPos{}, meta.DirEntry{}, walkEnd, Loc{}
		}
		dir, after = par, name
	}
}

// listedForWalk returns dir's cached listing when the walk may use it.
func (fs *FS) listedForWalk(dir Loc) (*meta.Listing, bool) {
	if dir.Bucket == "" {
		return nil, false
	}
	ls, ok := fs.deps.Meta.List(dir.cacheKey())
	if !ok || ls.Len() > faMaxEntries {
		return nil, false
	}
	return ls, true
}
