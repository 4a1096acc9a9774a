package scheduler

import (
	"fmt"
	"strings"
)

// MarkNodeLost takes a node whose agent stopped answering out of scheduling (fencing): from now
// on nothing is granted on it, and no pass counts its free or releasing capacity for anyone, so
// no request is nominated capacity on it and no job is preempted for its capacity there. Its
// accounting goes on as usual: jobs placed on it keep holding until they are Released or
// Cancelled, and releasing them frees the accounting, but the node still grants nothing until
// MarkNodeUp. It returns false if the node is unknown or already lost.
func (p *Pool) MarkNodeLost(node string) bool {
	return p.setLost(node, true)
}

// MarkNodeUp returns a lost node to scheduling: its free capacity serves the queue again from the
// next pass. It returns false if the node is unknown or not lost.
func (p *Pool) MarkNodeUp(node string) bool {
	return p.setLost(node, false)
}

// LostNodes returns the names of the lost nodes in config order, or nil if none is lost.
func (p *Pool) LostNodes() []string {
	var out []string
	for i := range p.nodes {
		if p.nodes[i].lost {
			out = append(out, p.nodes[i].Name)
		}
	}
	return out
}

func (p *Pool) setLost(node string, lost bool) bool {
	n, ok := p.nodeIdx[node]
	if !ok || p.nodes[n].lost == lost {
		return false
	}
	p.nodes[n].lost = lost
	p.nodeChanged(n)
	p.refreshLive(p.nodes[n].fam)
	p.touch()
	return true
}

// refreshLive rebuilds a family's list of nodes a pass may place on.
func (p *Pool) refreshLive(f int32) {
	fm := &p.fams[f]
	fm.live = fm.live[:0]
	for _, n := range fm.nodes {
		if !p.nodes[n].lost {
			fm.live = append(fm.live, n)
		}
	}
	for i := range p.shapes {
		if s := &p.shapes[i]; s.fam == f {
			p.refreshShapeLive(s)
		}
	}
}

// lostFit counts, in a request's family and within its allowed nodes (those of sh), the nodes
// large enough to hold one of its workers (were they empty) that are answering, and names those
// that are lost.
func (p *Pool) lostFit(sh *shape, d Demand) (live int, lost []string) {
	for _, n := range p.fams[p.famIdx[d.Family]].nodes {
		nd := &p.nodes[n]
		if !demandOf(&d).lessEqual(capacityOf(&nd.Node)) || !sh.may(n) {
			continue
		}
		if nd.lost {
			lost = append(lost, nd.Name)
		} else {
			live++
		}
	}
	return live, lost
}

// SetNodeNote says why a node out of scheduling is out, when it is not that
// its agent stopped answering (an operator drained it): the reasons a job
// waits then say "node n-2 is drained (disk swap)". "" forgets the note.
// Notes change no decision; they are not in snapshots (the caller keeps what
// they say and sets them again).
func (p *Pool) SetNodeNote(node, note string) {
	if note == "" {
		delete(p.notes, node)
		return
	}
	if p.notes == nil {
		p.notes = map[string]string{}
	}
	p.notes[node] = note
}

// outText says why the nodes out of scheduling are out: those with a note
// by it, the others as lost.
func (p *Pool) outText(names []string) string {
	var lost, noted []string
	for _, n := range names {
		if note, ok := p.notes[n]; ok {
			noted = append(noted, "node "+n+" is "+note)
		} else {
			lost = append(lost, n)
		}
	}
	if len(lost) > 0 {
		noted = append(noted, lostText(lost))
	}
	return strings.Join(noted, "; ")
}

// lostText says which nodes are lost, e.g. "node n-2 is lost: its agent is not answering".
func lostText(names []string) string {
	if len(names) == 1 {
		return "node " + names[0] + " is lost: its agent is not answering"
	}
	list := strings.Join(names, ", ")
	if len(names) > 3 {
		list = fmt.Sprintf("%s and %d more", strings.Join(names[:3], ", "), len(names)-3)
	}
	return "nodes " + list + " are lost: their agents are not answering"
}
