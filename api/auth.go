package api

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"

	"sigs.k8s.io/yaml"

	"github.com/trainq/trainq/protocol"
)

// Roles a token can have.
const (
	RoleUser  = "user"
	RoleAdmin = "admin"
)

// Principal is who a request acts for.
type Principal struct {
	User      string
	Workspace string
	Role      string
}

// Admin says whether the principal sees every workspace.
func (p Principal) Admin() bool { return p.Role == RoleAdmin }

// CanSee says whether the principal may see a job of workspace ws.
func (p Principal) CanSee(ws string) bool { return p.Admin() || ws == p.Workspace }

// TokenEntry is one token in the tokens file. Only the SHA-256 of the token
// is stored, so the file does not give tokens away.
type TokenEntry struct {
	SHA256    string `json:"sha256"`
	User      string `json:"user"`
	Workspace string `json:"workspace"`
	Role      string `json:"role"`
}

// TokenFile is the tokens file:
//
//	tokens:
//	  - {sha256: <hex of sha256(token)>, user: alice, workspace: team-a, role: user}
type TokenFile struct {
	Tokens []TokenEntry `json:"tokens"`
}

// Tokens checks bearer tokens against the file's hashes.
type Tokens struct {
	mu      sync.RWMutex
	entries []tokenEntry
}

type tokenEntry struct {
	hash [sha256.Size]byte
	p    Principal
}

// LoadTokens reads a tokens file. A bad entry stops loading, naming it.
func LoadTokens(path string) (*Tokens, error) {
	t := &Tokens{}
	return t, t.Reload(path)
}

// Reload rereads the file; on error the old tokens stay.
func (t *Tokens) Reload(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("tokens file: %w", err)
	}
	var f TokenFile
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		return fmt.Errorf("tokens file %s: %v", path, err)
	}
	entries, err := parseEntries(f)
	if err != nil {
		return fmt.Errorf("tokens file %s: %w", path, err)
	}
	t.mu.Lock()
	t.entries = entries
	t.mu.Unlock()
	return nil
}

func parseEntries(f TokenFile) ([]tokenEntry, error) {
	var out []tokenEntry
	seen := map[string]bool{}
	for i, e := range f.Tokens {
		field := fmt.Sprintf("tokens[%d]", i)
		h, err := hex.DecodeString(strings.ToLower(e.SHA256))
		if err != nil || len(h) != sha256.Size {
			return nil, fmt.Errorf("%s.sha256: want 64 hex digits, the SHA-256 of the token (`trainq-api token` writes entries)", field)
		}
		if seen[string(h)] {
			return nil, fmt.Errorf("%s.sha256: the same token appears twice", field)
		}
		seen[string(h)] = true
		if !protocol.ValidUserName(e.User) {
			return nil, fmt.Errorf("%s.user: %q is not a valid name (1-63 letters, digits, '-', '_', '.', '@')", field, e.User)
		}
		if !protocol.ValidUserName(e.Workspace) {
			return nil, fmt.Errorf("%s.workspace: %q is not a valid name (1-63 letters, digits, '-', '_', '.', '@')", field, e.Workspace)
		}
		if e.Role != RoleUser && e.Role != RoleAdmin {
			return nil, fmt.Errorf("%s.role: %q is not allowed; use user or admin", field, e.Role)
		}
		var te tokenEntry
		copy(te.hash[:], h)
		te.p = Principal{User: e.User, Workspace: e.Workspace, Role: e.Role}
		out = append(out, te)
	}
	return out, nil
}

// Lookup finds the principal of a bearer token. It hashes the token and
// compares the hash with every entry in constant time, without stopping at a
// match, so timing says nothing about which tokens exist.
func (t *Tokens) Lookup(token string) (Principal, bool) {
	if token == "" {
		return Principal{}, false
	}
	h := sha256.Sum256([]byte(token))
	t.mu.RLock()
	defer t.mu.RUnlock()
	var found Principal
	ok := 0
	for _, e := range t.entries {
		if subtle.ConstantTimeCompare(h[:], e.hash[:]) == 1 {
			found, ok = e.p, 1
		}
	}
	return found, ok == 1
}

// bearer extracts the token of the Authorization header: `Bearer <token>`
// (the scheme in any case, as HTTP says) or, as ML Space's own clients also
// send it, the bare token; whitespace around either is ignored.
func bearer(r *http.Request) (string, error) {
	h := strings.TrimSpace(r.Header.Get("Authorization"))
	if h == "" {
		return "", errors.New("missing Authorization header; send Authorization: Bearer <token>")
	}
	scheme, token, ok := strings.Cut(h, " ")
	if !ok {
		scheme, token, ok = strings.Cut(h, "\t")
	}
	if !ok {
		return h, nil // the bare token
	}
	token = strings.TrimSpace(token)
	if !strings.EqualFold(scheme, "Bearer") || token == "" || strings.ContainsAny(token, " \t") {
		return "", errors.New("the Authorization header must be Bearer <token>, or the token alone")
	}
	return token, nil
}

// workspaceHeader checks ML Space's x-workspace-id header, which its
// clients send on every call: when present it must name the token's
// workspace.
func workspaceHeader(r *http.Request, p Principal) error {
	ws := strings.TrimSpace(r.Header.Get("x-workspace-id"))
	if ws == "" || ws == p.Workspace {
		return nil
	}
	return errors.New("x-workspace-id names another workspace than the token's; send the token's workspace or leave the header out")
}

// NewToken makes a random token: 32 bytes, URL-safe base64, prefixed so it
// is recognisable in a leaked-secrets scan.
func NewToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return "tq_" + base64.RawURLEncoding.EncodeToString(b), nil
}

// HashToken is the hex SHA-256 the tokens file stores.
func HashToken(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

// AddToken appends a new token for (user, workspace, role) to the tokens
// file at path, creating it (mode 0600) if needed, and returns the token.
func AddToken(path, user, workspace, role string) (string, error) {
	var f TokenFile
	if b, err := os.ReadFile(path); err == nil {
		if err := yaml.UnmarshalStrict(b, &f); err != nil {
			return "", fmt.Errorf("tokens file %s: %v", path, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	token, err := NewToken()
	if err != nil {
		return "", err
	}
	f.Tokens = append(f.Tokens, TokenEntry{SHA256: HashToken(token), User: user, Workspace: workspace, Role: role})
	if _, err := parseEntries(f); err != nil {
		return "", err
	}
	out, err := yaml.Marshal(f)
	if err != nil {
		return "", err
	}
	header := "# trainq-api tokens: sha256 is the hex SHA-256 of the bearer token; the token itself is not stored.\n"
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append([]byte(header), out...), 0o600); err != nil {
		return "", err
	}
	return token, os.Rename(tmp, path)
}
