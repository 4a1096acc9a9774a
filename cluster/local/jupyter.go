package local

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/trainq/trainq/cluster"
)

// notebookRecord is notebook.json: what trainq needs to read a Jupyter
// server's status (the token is in launch.json too, with the env).
type notebookRecord struct {
	Token string `json:"token"`
}

func newNotebookToken() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// jupyterClient reads Jupyter servers on this machine: a status that takes
// longer than this is no answer.
var jupyterClient = &http.Client{Timeout: 5 * time.Second}

// NotebookStatus reads the Jupyter server of a notebook worker (see
// cluster.NotebookProber) on its port, at 127.0.0.1 (the server runs on
// this machine) or, where it listens on the node's address only, there.
func (b *Backend) NotebookStatus(ctx context.Context, id cluster.WorkerID) (cluster.JupyterStatus, error) {
	dir, err := b.WorkerDir(id)
	if err != nil {
		return cluster.JupyterStatus{}, err
	}
	var spec cluster.WorkerSpec
	if ok, err := readJSON(filepath.Join(dir, fileSpec), &spec); err != nil {
		return cluster.JupyterStatus{}, err
	} else if !ok {
		return cluster.JupyterStatus{}, fmt.Errorf("%w: %s", cluster.ErrNotFound, id)
	}
	var rec notebookRecord
	if ok, err := readJSON(filepath.Join(dir, fileNotebook), &rec); err != nil {
		return cluster.JupyterStatus{}, err
	} else if !ok || !spec.Notebook {
		return cluster.JupyterStatus{}, fmt.Errorf("%s is not a Jupyter server's worker", id)
	}
	port := strconv.Itoa(spec.MasterPort)
	st, err := cluster.ReadJupyterStatus(ctx, jupyterClient, "http://"+net.JoinHostPort("127.0.0.1", port)+"/", rec.Token)
	if err != nil && spec.MasterAddr != "" && spec.MasterAddr != "127.0.0.1" {
		if st2, err2 := cluster.ReadJupyterStatus(ctx, jupyterClient, "http://"+net.JoinHostPort(spec.MasterAddr, port)+"/", rec.Token); err2 == nil {
			return st2, nil
		}
	}
	return st, err
}

// NoteLog appends a line of trainq's to the worker's log (cluster.LogNoter):
// "[trainq] <line>", after whatever the worker wrote.
func (b *Backend) NoteLog(ctx context.Context, id cluster.WorkerID, line string) error {
	path, err := b.LogPath(id)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = fmt.Fprintf(f, "[trainq] %s\n", line)
	return err
}
