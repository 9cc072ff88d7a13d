package pki

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/grpc/metadata"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/service"
)

// A cluster token is never sent as it is. Every holder proves who it is
// with a credential derived from it: a task with
// HMAC-SHA256(token, "task:" + its name), a tool with
// HMAC-SHA256(token, "tool"), hex-encoded in the distflow-cluster-token
// metadata beside the name it claims in distflow-task. A task recomputes
// the credential of the name claimed and compares in constant time, so a
// call is taken for the task or tool whose credential it carries, not for
// whoever it says it is. A tool given only its credential (a tool token,
// WriteToolToken) cannot act as a task; whoever holds the cluster token
// itself (every task) can derive every credential.

// toolTokenPrefix opens a tool token file: the tool's credential, which
// the cluster token cannot be recovered from.
const toolTokenPrefix = "distflow-tool:"

// Bounds on what a call's token metadata may hold before anything is
// computed from it.
const (
	credentialLen = 2 * sha256.Size
	maxClaimLen   = 256
)

// taskCredential is the credential of task (its name, "/job:ps/task:0")
// under cluster token tok.
func taskCredential(tok []byte, task string) string {
	return derive(tok, "task:"+task)
}

// toolCredential is the credential of every tool under cluster token tok.
func toolCredential(tok []byte) string {
	return derive(tok, "tool")
}

func derive(tok []byte, label string) string {
	m := hmac.New(sha256.New, tok)
	m.Write([]byte(label))
	return hex.EncodeToString(m.Sum(nil))
}

// ToolToken returns the content of a tool token file for cluster token
// tok (the content of a --cluster-token-file, surrounding space ignored):
// what a tool (distflow status, a program opening grpc:// sessions) needs
// to call the services tools may call, and nothing that lets it act as a
// task.
func ToolToken(tok []byte) string {
	return toolTokenPrefix + toolCredential(tok) + "\n"
}

// WriteToolToken writes the tool token of the cluster token in
// clusterTokenFile to path (mode 0600; an existing file is replaced).
// Give tools the file made, and keep the cluster token to the tasks.
func WriteToolToken(clusterTokenFile, path string) error {
	tok, err := readToken(clusterTokenFile)
	if err != nil {
		return err
	}
	if strings.HasPrefix(string(tok), toolTokenPrefix) {
		return fmt.Errorf("pki: %s is a tool token already, not a cluster token", clusterTokenFile)
	}
	if err := os.WriteFile(path, []byte(ToolToken(tok)), 0o600); err != nil {
		return fmt.Errorf("pki: tool token: %w", err)
	}
	return nil
}

// readToolCredential returns a tool's credential from path: a tool token
// file as is, or the one derived from a cluster token.
func readToolCredential(path string) (string, error) {
	tok, err := readToken(path)
	if err != nil {
		return "", err
	}
	cred, ok := strings.CutPrefix(string(tok), toolTokenPrefix)
	if !ok {
		return toolCredential(tok), nil
	}
	if _, err := hex.DecodeString(cred); err != nil || len(cred) != credentialLen {
		return "", fmt.Errorf("pki: tool token %s: want %s and %d hex digits", filepath.Clean(path), toolTokenPrefix, credentialLen)
	}
	return cred, nil
}

// tokenAuth checks the token credentials of calls to a task of spec.
type tokenAuth struct {
	spec  *cluster.Spec
	tasks map[string]string // task name -> credential, made once
	tool  string
}

func newTokenAuth(tok []byte, spec *cluster.Spec) *tokenAuth {
	a := &tokenAuth{spec: spec, tasks: map[string]string{}, tool: toolCredential(tok)}
	for _, t := range spec.Tasks() {
		a.tasks[t.String()] = taskCredential(tok, t.String())
	}
	return a
}

// caller returns who a call comes from: the task or "client:NAME" it
// claims, when its credential is that name's. A credential of another
// holder is refused with an error wrapping service.ErrPermissionDenied
// that names both; one of nobody's, as a wrong cluster token.
func (a *tokenAuth) caller(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	creds, claims := md.Get(tokenKey), md.Get(taskKey)
	if len(creds) != 1 {
		return "", errors.New("no cluster token")
	}
	if len(claims) != 1 {
		return "", errors.New("the call names no task")
	}
	cred, claim := creds[0], claims[0]
	if len(claim) > maxClaimLen {
		return "", fmt.Errorf("the call claims a name of %d bytes", len(claim))
	}
	var want string
	if name, ok := strings.CutPrefix(claim, "client:"); ok {
		if !clientRE.MatchString(name) {
			return "", fmt.Errorf("bad client name %q", name)
		}
		want = a.tool
	} else if want, ok = a.tasks[claim]; !ok {
		return "", fmt.Errorf("%q is not a task of this cluster", claim)
	}
	if len(cred) == credentialLen && subtle.ConstantTimeCompare([]byte(cred), []byte(want)) == 1 {
		return claim, nil
	}
	if who := a.holder(cred); who != "" {
		return "", fmt.Errorf("%w: the call claims to come from %s, but its credential is %s's", service.ErrPermissionDenied, claim, who)
	}
	return "", errors.New("wrong cluster token")
}

// holder names whose credential cred is ("a tool", a task), or "".
func (a *tokenAuth) holder(cred string) string {
	if len(cred) != credentialLen {
		return ""
	}
	if subtle.ConstantTimeCompare([]byte(cred), []byte(a.tool)) == 1 {
		return "a tool"
	}
	for name, c := range a.tasks {
		if subtle.ConstantTimeCompare([]byte(cred), []byte(c)) == 1 {
			return name
		}
	}
	return ""
}

// authenticate is Options.Authenticate with a cluster token: the call's
// credential must be that of the name it claims.
func (a *tokenAuth) authenticate(ctx context.Context) error {
	_, err := a.caller(ctx)
	return err
}

// identify is Options.Identify with a cluster token alone: the caller is
// the task or tool whose credential the call carries; tools only call the
// methods of tools.
func (a *tokenAuth) identify(ctx context.Context, method string) (string, error) {
	who, err := a.caller(ctx)
	if err != nil {
		return "", err
	}
	if strings.HasPrefix(who, "client:") && !clientMayCall(method) {
		return "", fmt.Errorf("%s is a client: it may not call %s", who, method)
	}
	return who, nil
}
