package protocol

import "testing"

func TestValidNames(t *testing.T) {
	for _, tc := range []struct {
		name       string
		plain, usr bool
	}{
		{"team-a", true, true}, {"a.b_c-9", true, true}, {"ann@example.com", false, true},
		{"", false, false}, {"a b", false, false}, {"a/b", false, false}, {string(make([]byte, 64)), false, false},
	} {
		if ValidName(tc.name) != tc.plain || ValidUserName(tc.name) != tc.usr {
			t.Errorf("%q: ValidName %v, ValidUserName %v; want %v, %v", tc.name, ValidName(tc.name), ValidUserName(tc.name), tc.plain, tc.usr)
		}
	}
}
