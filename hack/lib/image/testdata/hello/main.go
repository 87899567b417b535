// Command hello stands in for tidegate-controller in hack/lib/image's tests: a small binary with
// the same build stamp.
package main

import "fmt"

func main() { fmt.Println("hello from the image") }
