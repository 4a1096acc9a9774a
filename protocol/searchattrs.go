package protocol

import (
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
)

// Typed search attribute keys of job workflows.
var (
	KeyState      = temporal.NewSearchAttributeKeyKeyword(SAState)
	KeyPriority   = temporal.NewSearchAttributeKeyKeyword(SAPriority)
	KeyAllocation = temporal.NewSearchAttributeKeyKeyword(SAAllocation)
	KeyRegion     = temporal.NewSearchAttributeKeyKeyword(SARegion)
	KeyAuthor     = temporal.NewSearchAttributeKeyKeyword(SAAuthor)
	KeyWorkspace  = temporal.NewSearchAttributeKeyKeyword(SAWorkspace)
	KeyKind       = temporal.NewSearchAttributeKeyKeyword(SAKind)
	KeyAttempt    = temporal.NewSearchAttributeKeyInt64(SAAttempt)
	KeyGPUs       = temporal.NewSearchAttributeKeyInt64(SAGPUs)
	KeyQueue      = temporal.NewSearchAttributeKeyKeyword(SAQueue)
	KeyShape      = temporal.NewSearchAttributeKeyKeyword(SAShape)
	KeyRunSeconds = temporal.NewSearchAttributeKeyInt64(SARunSeconds)
)

// SearchAttributeTypes lists every search attribute trainq needs, in a fixed
// order, for registration on a Temporal server.
var SearchAttributeTypes = []struct {
	Name string
	Type enumspb.IndexedValueType
}{
	{SAState, enumspb.INDEXED_VALUE_TYPE_KEYWORD},
	{SAPriority, enumspb.INDEXED_VALUE_TYPE_KEYWORD},
	{SAAllocation, enumspb.INDEXED_VALUE_TYPE_KEYWORD},
	{SARegion, enumspb.INDEXED_VALUE_TYPE_KEYWORD},
	{SAAuthor, enumspb.INDEXED_VALUE_TYPE_KEYWORD},
	{SAWorkspace, enumspb.INDEXED_VALUE_TYPE_KEYWORD},
	{SAKind, enumspb.INDEXED_VALUE_TYPE_KEYWORD},
	{SAAttempt, enumspb.INDEXED_VALUE_TYPE_INT},
	{SAGPUs, enumspb.INDEXED_VALUE_TYPE_INT},
	{SAQueue, enumspb.INDEXED_VALUE_TYPE_KEYWORD},
	{SAShape, enumspb.INDEXED_VALUE_TYPE_KEYWORD},
	{SARunSeconds, enumspb.INDEXED_VALUE_TYPE_INT},
}

// DevServerArgs are the `temporal server start-dev` flags trainq's dev and
// test servers run with: trainq's search attributes, and history task
// readers that are not rate-limited (DevServerDynamicConfig).
func DevServerArgs() []string {
	args := DevServerSearchAttributeArgs()
	for _, kv := range DevServerDynamicConfig {
		args = append(args, "--dynamic-config-value", kv)
	}
	return args
}

// DevServerDynamicConfig lifts the dev server's limits on how often its
// history shard reads its task queues. The dev server has a single history
// shard, and each queue reader polls at most MaxPollRPS (default 20) times a
// second per shard, so every task it hands on (a workflow or activity task
// to matching, a timer, a visibility update) waited about 45 ms on this
// alone: an unloaded job took 290 ms from submission to Running, 32 ms
// without the limit. A production cluster spreads workflows over many
// shards, and its operators set these limits for it.
var DevServerDynamicConfig = []string{
	"history.transferProcessorMaxPollRPS=1000",
	"history.transferProcessorMaxPollHostRPS=10000",
	"history.timerProcessorMaxPollRPS=1000",
	"history.timerProcessorMaxPollHostRPS=10000",
	"history.visibilityProcessorMaxPollRPS=1000",
	"history.visibilityProcessorMaxPollHostRPS=10000",
}

// DevServerSearchAttributeArgs are the `temporal server start-dev` flags that
// register trainq's search attributes.
func DevServerSearchAttributeArgs() []string {
	var args []string
	for _, sa := range SearchAttributeTypes {
		t := "Keyword"
		if sa.Type == enumspb.INDEXED_VALUE_TYPE_INT {
			t = "Int"
		}
		args = append(args, "--search-attribute", sa.Name+"="+t)
	}
	return args
}
