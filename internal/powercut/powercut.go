// Package powercut is a filesystem that can lose power, for tests that
// prove an acknowledged post survives one.
//
// It is a FUSE loopback over a backing directory that keeps, beside the
// live files every process sees, a model of what a disk would hold after a
// power failure, under the strict POSIX rules (stricter than ext4):
//
//   - a file's bytes and length are durable only up to its last fsync or
//     fdatasync; writes and truncations after it are lost;
//   - a directory's entries (names created, renamed or removed) are durable
//     only up to the directory's last fsync: creating a file and syncing it
//     does not make its name durable, nor does mkdir the new directory's.
//
// Cut is the power failure: from then on every fsync fails with EIO and
// changes nothing. Materialize writes the durable state as a directory
// tree: what the machine would find after it restarted.
package powercut

import (
	"context"
	"errors"
	"fmt"
	"golang.org/x/sys/unix"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// FS is a mounted power-cut filesystem.
type FS struct {
	m          *model
	server     *fuse.Server
	mountpoint string
}

// Mount mounts a power-cut filesystem on mountpoint that shows backing.
// Everything in backing is durable at the start. shadow is an empty
// directory of the caller's where durable file contents are kept. It needs
// root (the mount is made with mount(2)) and /dev/fuse.
func Mount(backing, mountpoint, shadow string) (*FS, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(backing, &st); err != nil {
		return nil, fmt.Errorf("powercut: stat backing directory: %w", err)
	}
	m := &model{backing: backing, shadow: shadow, byKey: map[fileKey]*mnode{}}
	if err := m.load(); err != nil {
		return nil, err
	}
	root := &fs.LoopbackRoot{Path: backing, Dev: uint64(st.Dev)}
	root.NewNode = func(r *fs.LoopbackRoot, _ *fs.Inode, _ string, _ *syscall.Stat_t) fs.InodeEmbedder {
		return &node{LoopbackNode: fs.LoopbackNode{RootData: r}, m: m}
	}
	rootNode := root.NewNode(root, nil, "", &st)
	root.RootNode = rootNode
	zero := time.Duration(0)
	server, err := fs.Mount(mountpoint, rootNode, &fs.Options{
		// No kernel caching of names or attributes: every lookup reaches
		// the model's view of the backing directory.
		EntryTimeout:    &zero,
		AttrTimeout:     &zero,
		NegativeTimeout: &zero,
		MountOptions: fuse.MountOptions{
			DirectMountStrict: true,
			FsName:            "powercut",
			Name:              "powercut",
			MaxWrite:          1 << 20,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("powercut: mount on %s: %w", mountpoint, err)
	}
	return &FS{m: m, server: server, mountpoint: mountpoint}, nil
}

// Cut is the power failure: every fsync from now on fails with EIO and
// makes nothing more durable. Processes keep running (kill them next).
func (f *FS) Cut() {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	f.m.cut = true
}

// Syncs is how many file and directory syncs succeeded.
func (f *FS) Syncs() (files, dirs int64) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	return f.m.fileSyncs, f.m.dirSyncs
}

// Unmount unmounts the filesystem (lazily if it is busy).
func (f *FS) Unmount() error {
	if err := f.server.Unmount(); err != nil {
		if err2 := syscall.Unmount(f.mountpoint, syscall.MNT_DETACH); err2 != nil {
			return fmt.Errorf("powercut: unmount %s: %w (lazily: %v)", f.mountpoint, err, err2)
		}
	}
	return nil
}

// Materialize writes the durable state to dst, a directory that must not
// exist yet: what a restarted machine would find.
func (f *FS) Materialize(dst string) error {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	return f.m.materialize(f.m.root, dst)
}

// model is what a disk holds durably, next to the live backing directory.
type model struct {
	backing, shadow string

	mu        sync.Mutex
	cut       bool
	root      *mnode
	rootKey   fileKey
	byKey     map[fileKey]*mnode // the live file each backing (inode, generation) is
	next      uint64
	fileSyncs int64
	dirSyncs  int64
}

// mnode is one file or directory. A file's durable bytes are in the
// shadow directory under its id; its writes since the last sync wait in
// pending. A directory's durable entries are in entries.
type mnode struct {
	id      uint64
	dir     bool
	mode    os.FileMode
	pending []op
	entries map[string]*mnode
}

// op is a write (data at off) or, when data is nil, a truncation to off.
type op struct {
	off  int64
	data []byte
}

// fileKey identifies a backing file: its inode number and generation (as
// the loopback gives it: from the file's birth time), so that a file made
// on a reused inode number is a new file to the model.
type fileKey struct{ ino, gen uint64 }

// statKey is the key and mode of the backing file at path (not followed).
func statKey(path string) (fileKey, uint32, error) {
	var x unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BASIC_STATS|unix.STATX_BTIME, &x); err != nil {
		return fileKey{}, 0, err
	}
	gen := uint64(1) // as the loopback's genFromBtime when there is no birth time
	if x.Mask&unix.STATX_BTIME != 0 && (x.Btime.Sec != 0 || x.Btime.Nsec != 0) {
		gen = uint64(x.Btime.Sec)*1e9 + uint64(x.Btime.Nsec)
	}
	return fileKey{ino: x.Ino, gen: gen}, uint32(x.Mode), nil
}

func (m *model) newNode(k fileKey, mode os.FileMode) *mnode {
	m.next++
	n := &mnode{id: m.next, dir: mode.IsDir(), mode: mode.Perm()}
	if n.dir {
		n.entries = map[string]*mnode{}
	}
	m.byKey[k] = n
	return n
}

func (m *model) shadowPath(n *mnode) string {
	return filepath.Join(m.shadow, strconv.FormatUint(n.id, 10))
}

// load makes everything now in the backing directory durable.
func (m *model) load() error {
	var walk func(path string) (*mnode, error)
	walk = func(path string) (*mnode, error) {
		k, mode, err := statKey(path)
		if err != nil {
			return nil, err
		}
		n := m.newNode(k, os.FileMode(mode&0o777)|modeDir(mode))
		if !n.dir {
			return n, copyFile(path, m.shadowPath(n))
		}
		des, err := os.ReadDir(path)
		if err != nil {
			return nil, err
		}
		for _, de := range des {
			c, err := walk(filepath.Join(path, de.Name()))
			if err != nil {
				return nil, err
			}
			n.entries[de.Name()] = c
		}
		return n, nil
	}
	root, err := walk(m.backing)
	if err != nil {
		return fmt.Errorf("powercut: load %s: %w", m.backing, err)
	}
	m.root = root
	for k, n := range m.byKey {
		if n == root {
			m.rootKey = k
		}
	}
	return nil
}

// created records that k is a new file or directory.
func (m *model) created(k fileKey, mode uint32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.byKey[k]; ok {
		return // a directory sync saw it first, with nothing durable
	}
	m.newNode(k, os.FileMode(mode&0o777)|modeDir(mode))
}

func modeDir(mode uint32) os.FileMode {
	if mode&syscall.S_IFMT == syscall.S_IFDIR {
		return os.ModeDir
	}
	return 0
}

// lookup is the live node of k, made (with nothing durable) if the model
// has not seen it.
func (m *model) lookup(k fileKey, mode uint32) *mnode {
	if n, ok := m.byKey[k]; ok {
		return n
	}
	return m.newNode(k, os.FileMode(mode&0o777)|modeDir(mode))
}

func (m *model) wrote(k fileKey, mode uint32, off int64, data []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.lookup(k, mode)
	n.pending = append(n.pending, op{off: off, data: append([]byte{}, data...)})
}

func (m *model) truncated(k fileKey, mode uint32, size int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.lookup(k, mode)
	n.pending = append(n.pending, op{off: size})
}

// syncFile makes a file's writes so far durable.
func (m *model) syncFile(k fileKey, mode uint32) syscall.Errno {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cut {
		return syscall.EIO
	}
	n := m.lookup(k, mode)
	if len(n.pending) > 0 {
		f, err := os.OpenFile(m.shadowPath(n), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return fs.ToErrno(err)
		}
		defer f.Close()
		for _, o := range n.pending {
			if o.data == nil {
				err = f.Truncate(o.off)
			} else {
				_, err = f.WriteAt(o.data, o.off)
			}
			if err != nil {
				return fs.ToErrno(err)
			}
		}
		n.pending = nil
	}
	m.fileSyncs++
	return 0
}

// syncDir makes a directory's entries as they are now durable.
func (m *model) syncDir(k fileKey, mode uint32, path string) syscall.Errno {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cut {
		return syscall.EIO
	}
	n := m.lookup(k, mode)
	des, err := os.ReadDir(path)
	if err != nil {
		return fs.ToErrno(err)
	}
	entries := make(map[string]*mnode, len(des))
	for _, de := range des {
		ck, cmode, err := statKey(filepath.Join(path, de.Name()))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fs.ToErrno(err)
		}
		entries[de.Name()] = m.lookup(ck, cmode)
	}
	n.entries = entries
	m.dirSyncs++
	return 0
}

func (m *model) materialize(n *mnode, dst string) error {
	if !n.dir {
		err := copyFile(m.shadowPath(n), dst)
		if errors.Is(err, os.ErrNotExist) {
			// Never synced: it exists (its name is durable) but is empty.
			err = os.WriteFile(dst, nil, 0o600)
		}
		if err != nil {
			return err
		}
		return os.Chmod(dst, n.mode)
	}
	if err := os.Mkdir(dst, 0o755); err != nil {
		return err
	}
	for name, c := range n.entries {
		if err := m.materialize(c, filepath.Join(dst, name)); err != nil {
			return err
		}
	}
	return os.Chmod(dst, n.mode)
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// node is a loopback node that tells the model what changes.
type node struct {
	fs.LoopbackNode
	m *model
}

var (
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeMkdirer        = (*node)(nil)
	_ fs.NodeMknoder        = (*node)(nil)
	_ fs.NodeWriter         = (*node)(nil)
	_ fs.NodeWritever       = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeFsyncer        = (*node)(nil)
	_ fs.NodeAllocater      = (*node)(nil)
	_ fs.NodeCopyFileRanger = (*node)(nil)
	_ fs.NodeSymlinker      = (*node)(nil)
	_ fs.NodeTmpfiler       = (*node)(nil)
)

// key is the node's backing file key and mode.
func (n *node) key() (fileKey, uint32) {
	if n.IsRoot() {
		// The mount's root is FUSE's node 1, not its backing inode.
		return n.m.rootKey, syscall.S_IFDIR
	}
	a := n.StableAttr()
	return fileKey{ino: a.Ino, gen: a.Gen}, a.Mode
}

func (n *node) backingPath() string {
	return filepath.Join(n.RootData.Path, n.Path(nil))
}

func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	ch, fh, ff, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	if errno == 0 {
		a := ch.StableAttr()
		n.m.created(fileKey{ino: a.Ino, gen: a.Gen}, a.Mode)
	}
	return ch, wrap(fh), ff, errno
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, ff, errno := n.LoopbackNode.Open(ctx, flags)
	if errno == 0 && flags&syscall.O_TRUNC != 0 {
		// The kernel truncates with a setattr before the open, unless the
		// mount has atomic_o_trunc and leaves it to the open: either way
		// a truncation (recording it twice is harmless).
		k, mode := n.key()
		n.m.truncated(k, mode, 0)
	}
	return wrap(fh), ff, errno
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ch, errno := n.LoopbackNode.Mkdir(ctx, name, mode, out)
	if errno == 0 {
		a := ch.StableAttr()
		n.m.created(fileKey{ino: a.Ino, gen: a.Gen}, a.Mode)
	}
	return ch, errno
}

func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ch, errno := n.LoopbackNode.Mknod(ctx, name, mode, rdev, out)
	if errno == 0 {
		a := ch.StableAttr()
		n.m.created(fileKey{ino: a.Ino, gen: a.Gen}, a.Mode)
	}
	return ch, errno
}

// Tmpfile (O_TMPFILE) is refused: the model would not see the file made.
func (n *node) Tmpfile(context.Context, uint32, uint32, *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EOPNOTSUPP
}

// Symlink is not modelled (weir makes none).
func (n *node) Symlink(context.Context, string, string, *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

func (n *node) Write(ctx context.Context, f fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	w, ok := f.(fs.FileWriter)
	if !ok {
		return 0, syscall.EBADF
	}
	written, errno := w.Write(ctx, data, off)
	if written > 0 {
		k, mode := n.key()
		n.m.wrote(k, mode, off, data[:written])
	}
	return written, errno
}

func (n *node) Writev(ctx context.Context, f fs.FileHandle, data [][]byte, off int64) (uint32, syscall.Errno) {
	var total uint32
	for _, d := range data {
		w, errno := n.Write(ctx, f, d, off)
		total += w
		off += int64(w)
		if errno != 0 || int(w) < len(d) {
			return total, errno
		}
	}
	return total, 0
}

func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	errno := n.LoopbackNode.Setattr(ctx, f, in, out)
	if size, ok := in.GetSize(); ok && errno == 0 {
		k, mode := n.key()
		n.m.truncated(k, mode, int64(size))
	}
	return errno
}

// Allocate and CopyFileRange are refused (callers fall back to writes),
// so that every change to a file's bytes is a write or a truncation.
func (n *node) Allocate(context.Context, fs.FileHandle, uint64, uint64, uint32) syscall.Errno {
	return syscall.EOPNOTSUPP
}

func (n *node) CopyFileRange(context.Context, fs.FileHandle, uint64, *fs.Inode, fs.FileHandle, uint64, uint64, uint64) (uint32, syscall.Errno) {
	return 0, syscall.EOPNOTSUPP
}

// Fsync serves fsync, fdatasync and (for a directory) fsyncdir. The
// backing files need no sync of their own: the model is the disk.
func (n *node) Fsync(_ context.Context, _ fs.FileHandle, _ uint32) syscall.Errno {
	k, mode := n.key()
	if mode&syscall.S_IFMT == syscall.S_IFDIR {
		return n.m.syncDir(k, mode, n.backingPath())
	}
	return n.m.syncFile(k, mode)
}

// OpendirHandle hides the loopback's method of that name, whose directory
// handles answer fsyncdir themselves: without it, a directory is read
// through Readdir and its fsyncdir reaches Fsync below.
func (n *node) OpendirHandle() {}

// file is a loopback file handle without its PassthroughFd: with FUSE
// passthrough the kernel would read and write the backing file itself, and
// the model would never see a write.
type file struct{ h fs.FileHandle }

func wrap(h fs.FileHandle) fs.FileHandle {
	if h == nil {
		return nil
	}
	return &file{h: h}
}

var (
	_ fs.FileReader    = (*file)(nil)
	_ fs.FileWriter    = (*file)(nil)
	_ fs.FileFlusher   = (*file)(nil)
	_ fs.FileReleaser  = (*file)(nil)
	_ fs.FileFsyncer   = (*file)(nil)
	_ fs.FileGetattrer = (*file)(nil)
	_ fs.FileSetattrer = (*file)(nil)
	_ fs.FileLseeker   = (*file)(nil)
)

func (f *file) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if r, ok := f.h.(fs.FileReader); ok {
		return r.Read(ctx, dest, off)
	}
	return nil, syscall.ENOTSUP
}

func (f *file) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if w, ok := f.h.(fs.FileWriter); ok {
		return w.Write(ctx, data, off)
	}
	return 0, syscall.ENOTSUP
}

func (f *file) Flush(ctx context.Context) syscall.Errno {
	if fl, ok := f.h.(fs.FileFlusher); ok {
		return fl.Flush(ctx)
	}
	return 0
}

func (f *file) Release(ctx context.Context) syscall.Errno {
	if r, ok := f.h.(fs.FileReleaser); ok {
		return r.Release(ctx)
	}
	return 0
}

// Fsync is not reached (the node's Fsync is); it is here so that a
// handle never syncs the backing file behind the model's back.
func (f *file) Fsync(context.Context, uint32) syscall.Errno { return 0 }

func (f *file) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	if g, ok := f.h.(fs.FileGetattrer); ok {
		return g.Getattr(ctx, out)
	}
	return syscall.ENOTSUP
}

func (f *file) Setattr(ctx context.Context, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if s, ok := f.h.(fs.FileSetattrer); ok {
		return s.Setattr(ctx, in, out)
	}
	return syscall.ENOTSUP
}

func (f *file) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	if l, ok := f.h.(fs.FileLseeker); ok {
		return l.Lseek(ctx, off, whence)
	}
	return 0, syscall.ENOTSUP
}
