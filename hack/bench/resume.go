package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
)

// partialPath is where a set's raw results are kept while it runs, written
// again after every run, so that a set of hours that is interrupted loses
// at most the run it was in (-resume continues it).
func partialPath(jsonOut string) string { return jsonOut + ".partial" }

// writeRaw writes raw results, those of the runs that failed after the
// rest, to path whole or not at all (a set killed mid-write keeps the copy
// before): the -json file, and the results so far beside it.
func writeRaw(path string, results, failed []result) error {
	raw, err := json.MarshalIndent(slices.Concat(results, failed), "", " ")
	if err != nil {
		return fmt.Errorf("encoding raw results: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, raw, 0o644); err != nil {
		return fmt.Errorf("writing raw results: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing raw results: %w", err)
	}
	return nil
}

// loadCheckpoint returns the runs an interrupted set finished, by runKey,
// to be kept rather than run again; the runs that failed are run again. It
// refuses results made by another command or another operator build: a
// set mixes neither.
func loadCheckpoint(path, run string) (map[string]result, error) {
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("-resume: no interrupted set to continue (%s does not exist)", path)
	}
	if err != nil {
		return nil, fmt.Errorf("-resume: reading %s: %w", path, err)
	}
	var earlier []result
	if err := json.Unmarshal(raw, &earlier); err != nil {
		return nil, fmt.Errorf("-resume: decoding %s: %w", path, err)
	}
	done := map[string]result{}
	for _, r := range earlier {
		if r.Run != run {
			return nil, fmt.Errorf("-resume: %s holds a run of %s, not of %s: start the set again without -resume",
				path, r.Run, run)
		}
		if r.Failed == "" {
			done[runKey(r)] = r
		}
	}
	return done, nil
}

// withoutResume is the command's arguments less -resume, so that a set
// continued keeps the name of the set it continues.
func withoutResume(args []string) []string {
	return slices.DeleteFunc(slices.Clone(args), func(a string) bool {
		return a == "-resume" || a == "--resume" || a == "-resume=true" || a == "--resume=true"
	})
}
