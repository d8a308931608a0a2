package topo

import (
	"path/filepath"
	"testing"
)

// TestExamples loads, builds and checks every file in examples/, so that a
// broken example fails CI, and pins the counts its header comment states.
func TestExamples(t *testing.T) {
	files, err := filepath.Glob("../../examples/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 6 {
		t.Fatalf("%d example files, want at least 6", len(files))
	}
	// hosts, GPUs, leaf, spine, core, host-leaf, leaf-spine, spine-core
	want := map[string][8]int{
		"superpod-1su.yaml":                    {31, 248, 8, 4, 0, 248, 256, 0},
		"superpod-4su.yaml":                    {127, 1016, 32, 16, 0, 1016, 1024, 0},
		"fattree-2tier-k64.yaml":               {2048, 2048, 64, 32, 0, 2048, 2048, 0},
		"fattree-2tier-k64-2to1.yaml":          {2048, 2048, 49, 21, 0, 2048, 1029, 0},
		"fattree-3tier-k16.yaml":               {1024, 1024, 128, 128, 64, 1024, 1024, 1024},
		"explicit-small.yaml":                  {4, 8, 2, 2, 0, 8, 8, 0},
		"fattree-2tier-k64-8gpu.yaml":          {256, 2048, 64, 32, 0, 2048, 2048, 0},
		"fattree-2tier-k128-8gpu.yaml":         {512, 4096, 64, 64, 0, 4096, 4096, 0},
		"superpod-2plane.yaml":                 {31, 248, 16, 8, 0, 496, 512, 0},
		"fattree-2tier-k128-8gpu-compact.yaml": {512, 4096, 64, 32, 0, 4096, 4096, 0},
		"fattree-3tier-k64-8gpu-compact.yaml":  {512, 4096, 128, 128, 64, 4096, 4096, 4096},
	}
	// planes, GPUs per host, NICs, link rate in Gb/s, of the examples
	// whose NICs are not one per GPU or whose rate is not NDR's.
	shape := map[string][4]int{
		"fattree-2tier-k64-8gpu.yaml":          {1, 8, 2048, 400},
		"fattree-2tier-k128-8gpu.yaml":         {1, 8, 4096, 400},
		"superpod-2plane.yaml":                 {2, 8, 496, 200},
		"fattree-2tier-k128-8gpu-compact.yaml": {1, 8, 4096, 400},
		"fattree-3tier-k64-8gpu-compact.yaml":  {1, 8, 4096, 400},
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			s, err := Load(f)
			if err != nil {
				t.Fatal(err)
			}
			g, err := s.Build()
			if err != nil {
				t.Fatal(err)
			}
			mustCheck(t, g)
			c := g.Counts()
			if w, ok := shape[filepath.Base(f)]; ok {
				got := [4]int{c.Planes, c.GPUsPerHost, c.NICs, int(g.Links[0].Rate / 1e9)}
				if got != w {
					t.Errorf("planes gpus/host nics Gb/s = %v, want %v", got, w)
				}
			}
			w, ok := want[filepath.Base(f)]
			if !ok {
				return
			}
			got := [8]int{c.Hosts, c.GPUs, c.Switches.Leaf, c.Switches.Spine, c.Switches.Core,
				c.Links.HostLeaf, c.Links.LeafSpine, c.Links.SpineCore}
			if got != w {
				t.Errorf("hosts gpus leaf spine core host-leaf leaf-spine spine-core = %v, want %v", got, w)
			}
		})
	}
}
