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
