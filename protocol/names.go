package protocol

// ValidName reports whether s may name a workspace, an allocation, a node or a queue in the
// config: 1 to 63 letters, digits, '-', '_' and '.'.
func ValidName(s string) bool { return validName(s, false) }

// ValidUserName is ValidName that also allows '@', for users (often e-mail addresses), the
// workspaces of the tokens file and the API's filter values. Both charsets keep a name safe
// inside visibility queries and log lines.
func ValidUserName(s string) bool { return validName(s, true) }

func validName(s string, at bool) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' || at && r == '@') {
			return false
		}
	}
	return true
}
