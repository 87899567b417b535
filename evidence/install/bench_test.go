package install

import (
	"fmt"
	"testing"
)

// BenchmarkCheckEach1000Clusters checks the values of a wave of 1,000 clusters, each with a
// namespace and a region of its own, against one schema.
func BenchmarkCheckEach1000Clusters(b *testing.B) {
	schema := []byte(`package install

values: {
	namespace: =~"^team-[a-z0-9-]+$"
	region:    "eu" | "us"
	replicas?: =~"^[0-9]+$"
}
protected: ["image"]
`)
	values := make([]map[string]string, 1000)
	for i := range values {
		values[i] = map[string]string{"namespace": fmt.Sprintf("team-%04d", i), "region": "eu", "replicas": "2"}
	}
	b.ReportAllocs()
	for b.Loop() {
		evs, err := CheckEach(schema, values)
		if err != nil || len(evs) != len(values) || len(evs[999].Violations) != 0 {
			b.Fatalf("%v, %+v", err, evs[999])
		}
	}
}
