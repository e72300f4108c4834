package extract

import (
	"slices"
	"testing"
)

func TestCurlGlob(t *testing.T) {
	urls, alts := curlGlob("https://h/{a,b}/x{1,2}.txt", 64)
	want := []string{"https://h/a/x1.txt", "https://h/a/x2.txt", "https://h/b/x1.txt", "https://h/b/x2.txt"}
	if !slices.Equal(urls, want) || len(alts) != 4 || !slices.Equal(alts[3], []string{"b", "2"}) {
		t.Errorf("curlGlob = %q %q", urls, alts)
	}
	if got := curlOutputName("out/#2-#1.#3", alts[3]); got != "out/2-b.#3" {
		t.Errorf("curlOutputName = %q", got)
	}
	for _, s := range []string{"https://h/[1-3].txt", "https://h/{a,b", "https://h/{a,b}{c,d}{e,f}{g,h}{i,j}{k,l}{m,n}"} {
		if u, _ := curlGlob(s, 64); u != nil {
			t.Errorf("curlGlob(%q) = %q, want nil", s, u)
		}
	}
	if u, _ := curlGlob("http://[::1]/{a,b}", 64); !slices.Equal(u, []string{"http://[::1]/a", "http://[::1]/b"}) {
		t.Errorf("curlGlob of an IPv6 URL = %q", u)
	}
}
