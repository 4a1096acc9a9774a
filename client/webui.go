package client

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// Summary is the one-line summary the Web UI shows for a job.
func Summary(s protocol.JobSpec) string {
	kind := ""
	if s.Kind == scheduler.KindNotebook {
		kind = "Jupyter · "
	}
	return fmt.Sprintf("%s%s · %d×%s · %s/%s · max_retry %d", kind, s.PriorityClass, s.NWorkers, s.InstanceType, s.Region, s.AllocationName, s.MaxRetry)
}

// Details is the Markdown spec the Web UI shows for a job. Temporal limits
// details to 20000 bytes (limit.userMetadataDetailsSize), so long values are
// cut and rows that do not fit are left out: the spec itself is in the
// workflow input, whole.
func Details(s protocol.JobSpec) string {
	const valueMax, total = 512, 16000
	var b strings.Builder
	truncated := false
	size := 2 // the JSON-encoded size so far, quotes included
	row := func(k, v string) {
		if v == "" || truncated {
			return
		}
		if len(k) > valueMax {
			k = strings.ToValidUTF8(k[:valueMax], "") + "…"
		}
		if len(v) > valueMax {
			v = strings.ToValidUTF8(v[:valueMax], "") + "…"
		}
		line := fmt.Sprintf("| %s | `%s` |\n", k, strings.ReplaceAll(v, "|", "\\|"))
		enc, _ := json.Marshal(line)
		if size+len(enc)-2 > total {
			truncated = true
			b.WriteString("| … | (more in the workflow input) |\n")
			return
		}
		size += len(enc) - 2
		b.WriteString(line)
	}
	b.WriteString("| field | value |\n|---|---|\n")
	size += 30
	for _, f := range s.Fields() {
		row(f.Name, f.Value)
	}
	return b.String()
}
