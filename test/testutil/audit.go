package testutil

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// AuditPolicy records every pod create with its request body, the
// metadata of every write to pods, Jobs and SafeJobs, of every list and
// watch of pods (a client that lost its watch lists again: the cost a
// watch closed for falling behind brings, by client), and of every request
// of a ServiceAccount of the namespace OperatorNamespace (the operator as
// shipped, to check its RBAC); no other reads.
const AuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: Request
  verbs: ["create"]
  resources:
  - group: ""
    resources: ["pods"]
- level: Metadata
  userGroups: ["system:serviceaccounts:` + OperatorNamespace + `"]
- level: Metadata
  verbs: ["create", "update", "patch", "delete"]
  resources:
  - group: ""
    resources: ["pods", "pods/status"]
  - group: "batch"
    resources: ["jobs", "jobs/status"]
  - group: "batch.safejob.dev"
    resources: ["safejobs", "safejobs/status"]
- level: Metadata
  verbs: ["list", "watch"]
  resources:
  - group: ""
    resources: ["pods"]
- level: None
`

// OperatorNamespace is where config/default installs the operator.
const OperatorNamespace = "safejob-system"

// WriteAuditPolicy writes AuditPolicy into dir and returns its path and the
// path the audit log will have.
func WriteAuditPolicy(dir string) (policy, log string, err error) {
	policy = filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(AuditPolicy), 0o600); err != nil {
		return "", "", fmt.Errorf("writing audit policy: %w", err)
	}
	return policy, filepath.Join(dir, "audit.log"), nil
}

type auditEvent struct {
	RequestReceived time.Time `json:"requestReceivedTimestamp"`
	StageTimestamp  time.Time `json:"stageTimestamp"`
	UserAgent       string    `json:"userAgent"`
	Verb            string    `json:"verb"`
	Stage           string    `json:"stage"`
	RequestURI      string    `json:"requestURI"`
	User            struct {
		Username string              `json:"username"`
		Extra    map[string][]string `json:"extra"`
	} `json:"user"`
	ObjectRef struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	RequestObject struct {
		Metadata struct {
			Name         string `json:"name"`
			GenerateName string `json:"generateName"`
		} `json:"metadata"`
	} `json:"requestObject"`
}

// AuditLogMaxSizeMB is the --audit-log-maxsize the tests give kube-apiserver:
// 1 TiB, so that the log they read is never rotated. 0 does not turn rotation
// off: the log writer then rotates at 100 MB, which a 5,000-pod test repeated
// a few times reaches, and the creates before it leave the file read.
const AuditLogMaxSizeMB = "1048576"

// PodCreates reads the API server's audit log and counts, per pod name, the
// creates that stored a pod in namespace ns: evidence no controller can
// fake.
func PodCreates(logPath, ns string) (map[string]int, error) {
	all, err := PodCreatesByNamespace(logPath)
	if err != nil {
		return nil, err
	}
	if all[ns] == nil {
		return map[string]int{}, nil
	}
	return all[ns], nil
}

// PodCreatesByNamespace counts the creates that stored a pod, per namespace
// and pod name; a generated name counts as its prefix plus a serial.
func PodCreatesByNamespace(logPath string) (map[string]map[string]int, error) {
	return CreatesByNamespace(logPath, "pods")
}

// CreatesByNamespace counts the creates that stored an object of a resource
// ("pods", "safejobs", "jobs"), per namespace and name.
func CreatesByNamespace(logPath, resource string) (map[string]map[string]int, error) {
	events, err := Creates(logPath, resource)
	if err != nil {
		return nil, err
	}
	out := map[string]map[string]int{}
	for _, c := range events {
		if out[c.Namespace] == nil {
			out[c.Namespace] = map[string]int{}
		}
		out[c.Namespace][c.Name]++
	}
	return out, nil
}

// Create is one successful create in the audit log.
type Create struct {
	Namespace, Name string
	// Received is when the API server received the request.
	Received time.Time
}

// Request is one completed request in the audit log.
type Request struct {
	Verb, Resource, Subresource, Namespace, Name, URI string
	Code                                              int
	// Credential identifies the credential used (for a ServiceAccount token,
	// "JTI=<the token's jti>"): two tokens of one ServiceAccount tell two
	// processes apart.
	Credential string
	Received   time.Time
}

// CredentialIDKey is the user extra key the API server records a
// credential's identity under.
const CredentialIDKey = "authentication.kubernetes.io/credential-id"

// UserRequests lists the completed requests of a user in the audit log, in
// log order (only those the audit policy records).
func UserRequests(logPath, username string) ([]Request, error) {
	var out []Request
	err := scanAudit(logPath, func(e *auditEvent) {
		if e.Stage != "ResponseComplete" || e.User.Username != username {
			return
		}
		r := Request{Verb: e.Verb, Resource: e.ObjectRef.Resource, Subresource: e.ObjectRef.Subresource,
			Namespace: e.ObjectRef.Namespace, Name: e.ObjectRef.Name, URI: e.RequestURI, Code: e.ResponseStatus.Code,
			Received: e.RequestReceived}
		if ids := e.User.Extra[CredentialIDKey]; len(ids) > 0 {
			r.Credential = ids[0]
		}
		out = append(out, r)
	})
	return out, err
}

// dryRun reports a request made with dryRun (kubectl --dry-run=server):
// the API server ran its admission and stored nothing.
func (e *auditEvent) dryRun() bool {
	u, err := url.Parse(e.RequestURI)
	return err == nil && u.Query().Has("dryRun")
}

// scanAudit calls f with every complete event of the audit log.
func scanAudit(logPath string, f func(*auditEvent)) error {
	raw, err := os.ReadFile(logPath)
	if err != nil {
		return fmt.Errorf("reading audit log: %w", err)
	}
	// The API server may be appending while we read: a last line without its
	// newline is an event still being written, not a malformed one.
	if i := bytes.LastIndexByte(raw, '\n'); i >= 0 {
		raw = raw[:i+1]
	} else {
		raw = nil
	}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e auditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return fmt.Errorf("reading audit log: %w", err)
		}
		if e.dryRun() {
			continue // stored nothing: no count of writes or creates includes it
		}
		f(&e)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading audit log: %w", err)
	}
	return nil
}

// Creates lists the creates that stored an object of a resource in the
// audit log, in the order the API server received them; a generated name is
// its prefix plus a serial.
//
// A create the API server answered with a server error (a 504 when the
// client went away, was killed or timed out mid-request) may still store
// the object: the API server answers as soon as the request's context ends
// while the write goes on, and logs the answer after requests received
// later. Such a create counts when a request received after it shows the
// object existed: one on the same name succeeded, or a create of it was
// refused as AlreadyExists, before the next successful create of that name.
// A named object only: a generated name is not known until the answer.
func Creates(logPath, resource string) ([]Create, error) {
	var events []auditEvent
	err := scanAudit(logPath, func(e *auditEvent) {
		if e.Stage == "ResponseComplete" && e.ObjectRef.Resource == resource {
			events = append(events, *e)
		}
	})
	slices.SortStableFunc(events, func(a, b auditEvent) int { return a.RequestReceived.Compare(b.RequestReceived) })
	type slot struct {
		Create
		stored bool // a 201, or a server error a later request shows stored
	}
	var out []slot
	uncertain := map[[2]string]int{} // namespace and name: its create's index in out
	serial := 0
	for i := range events {
		e := &events[i]
		name := e.objectName()
		key := [2]string{e.ObjectRef.Namespace, name}
		if j, ok := uncertain[key]; ok && e.showsExisting() {
			out[j].stored = true // the object existed: the uncertain create stored it
			delete(uncertain, key)
		}
		if !e.isCreate() {
			continue
		}
		code := e.ResponseStatus.Code
		switch {
		case code == 201:
			delete(uncertain, key) // an uncertain create before it stored nothing
			if name == "" {
				serial++
				name = fmt.Sprintf("%s#%d", e.RequestObject.Metadata.GenerateName, serial)
			}
		case code >= 500 && name != "":
			uncertain[key] = len(out)
		default:
			continue
		}
		out = append(out, slot{Create{Namespace: e.ObjectRef.Namespace, Name: name, Received: e.RequestReceived}, code == 201})
	}
	var creates []Create
	for _, s := range out {
		if s.stored {
			creates = append(creates, s.Create)
		}
	}
	return creates, err
}

// objectName is the name of the object the request is about: in its path,
// or in a create's body ("" for a generated name).
func (e *auditEvent) objectName() string {
	if e.ObjectRef.Name != "" {
		return e.ObjectRef.Name
	}
	return e.RequestObject.Metadata.Name
}

// isCreate reports whether the request creates an object (not a
// subresource such as a pod's binding).
func (e *auditEvent) isCreate() bool {
	return e.Verb == "create" && e.ObjectRef.Subresource == ""
}

// showsExisting reports whether the request's answer shows its object
// existed when it was served: any success but a create's, or a create
// refused as AlreadyExists.
func (e *auditEvent) showsExisting() bool {
	code := e.ResponseStatus.Code
	if e.isCreate() {
		return code == 409
	}
	return code >= 200 && code < 300
}

// Writes lists the completed writes (create, update, patch, delete) of a
// resource's subresource ("" for the object itself) in the audit log, in
// log order, whoever made them; a create is named as its body names the
// object.
func Writes(logPath, resource, subresource string) ([]Request, error) {
	var out []Request
	err := scanAudit(logPath, func(e *auditEvent) {
		if e.Stage != "ResponseComplete" || e.ObjectRef.Resource != resource || e.ObjectRef.Subresource != subresource ||
			!slices.Contains([]string{"create", "update", "patch", "delete"}, e.Verb) {
			return
		}
		out = append(out, Request{Verb: e.Verb, Resource: e.ObjectRef.Resource, Subresource: e.ObjectRef.Subresource,
			Namespace: e.ObjectRef.Namespace, Name: e.objectName(), URI: e.RequestURI, Code: e.ResponseStatus.Code,
			Received: e.RequestReceived})
	})
	return out, err
}

// WatchesEnded counts, by client (the first word of its user agent, e.g.
// "kwok-v0.7.0"), the watches of a resource that ended between since
// and until: closed by the API server (the client fell behind, or the watch
// reached its timeout) or by the client. A client watches again after each;
// one that starts over from resourceVersion 0 is sent every object again.
func WatchesEnded(logPath, resource string, since, until time.Time) (map[string]int, error) {
	out := map[string]int{}
	err := scanAudit(logPath, func(e *auditEvent) {
		if e.Stage != "ResponseComplete" || e.Verb != "watch" || e.ObjectRef.Resource != resource ||
			e.StageTimestamp.Before(since) || e.StageTimestamp.After(until) {
			return
		}
		client, _, _ := strings.Cut(e.UserAgent, "/")
		out[client]++
	})
	return out, err
}
