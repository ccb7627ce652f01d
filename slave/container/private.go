package container

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/distribution/reference"

	"github.com/opengpulab/gpulab/job"
)

// privateImages records the images this slave pulled with a job's registry credentials: the
// repositories and the image ids they gave. The engine keeps a pulled image for anyone; the
// record is what makes a job without credentials that names one (by its name or its id) be
// refused instead of running an image its owner could never have pulled. Kept in a file so
// that a restarted slave still knows.
type privateImages struct {
	mu     sync.Mutex
	path   string // "" : in memory only
	loaded bool
	repos  map[string]bool
	ids    map[string]bool
}

// privateFile is the record's file format.
type privateFile struct {
	Repositories []string `json:"repositories"`
	ImageIDs     []string `json:"imageIds"`
}

func newPrivateImages(path string) *privateImages {
	return &privateImages{path: path, repos: map[string]bool{}, ids: map[string]bool{}}
}

// load reads the record once; a missing file is an empty record.
func (p *privateImages) load() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.loaded || p.path == "" {
		p.loaded = true
		return nil
	}
	data, err := os.ReadFile(p.path)
	if errors.Is(err, fs.ErrNotExist) {
		p.loaded = true
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the private images' record: %w", err)
	}
	var f privateFile
	if err := json.Unmarshal(data, &f); err != nil {
		return fmt.Errorf("read the private images' record %s: %w", p.path, err)
	}
	for _, r := range f.Repositories {
		p.repos[r] = true
	}
	for _, id := range f.ImageIDs {
		p.ids[id] = true
	}
	p.loaded = true
	return nil
}

// add records a repository and (when known) an image id as private, and saves the record
// before it returns: a crash right after a pull must not make the image public. added: the
// repository was not recorded before.
func (p *privateImages) add(repo, id string) (added bool, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.repos[repo] && (id == "" || p.ids[id]) {
		return false, nil
	}
	added = !p.repos[repo]
	p.repos[repo] = true
	if id != "" {
		p.ids[id] = true
	}
	return added, p.save()
}

// remove takes a repository back (its pull with credentials failed: nothing proved it private).
func (p *privateImages) remove(repo string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.repos, repo)
	return p.save()
}

// save writes the record to a temporary file and renames it over the old one, so that a crash
// leaves one or the other whole. The caller holds mu.
func (p *privateImages) save() error {
	if p.path == "" {
		return nil
	}
	data, err := json.MarshalIndent(privateFile{
		Repositories: slices.Sorted(maps.Keys(p.repos)),
		ImageIDs:     slices.Sorted(maps.Keys(p.ids)),
	}, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(p.path), ".private-images-*")
	if err != nil {
		return fmt.Errorf("save the private images' record: %w", err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("save the private images' record: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("save the private images' record: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("save the private images' record: %w", err)
	}
	if err := os.Rename(tmp.Name(), p.path); err != nil {
		return fmt.Errorf("save the private images' record: %w", err)
	}
	return nil
}

// hasRepo reports whether a repository is recorded private.
func (p *privateImages) hasRepo(repo string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.repos[repo]
}

// hasID reports whether an image id is recorded private.
func (p *privateImages) hasID(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ids[id]
}

// anyPublic reports whether one of an image's local names (RepoTags, RepoDigests) belongs to a
// repository not recorded private: the same content is public under that name, and naming it
// by its id reveals nothing.
func (p *privateImages) anyPublic(names []string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, n := range names {
		named, err := reference.ParseNormalizedNamed(n)
		if err == nil && !p.repos[named.Name()] {
			return true
		}
	}
	return false
}

// repository is an image's repository as the engine names it ("docker.io/library/ubuntu"),
// so that "ubuntu" and "docker.io/library/ubuntu:22.04" are one repository.
func repository(img job.Image) string {
	named, err := reference.ParseNormalizedNamed(img.Reference())
	if err != nil {
		return img.Reference()
	}
	return named.Name()
}
