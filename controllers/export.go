package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/internal/ops"
)

// ReceiptExport writes the receipts the controller prunes to a directory before they are deleted
// (--records-export-dir; a volume of the controller's pod): each as <dir>/<namespace>/<rollout>/
// <receipt>.json, the receipt with its evidence as a receipt bundle holds it (ops.BundleReceiptOf),
// read whole from the API server. A receipt that cannot be written there is not deleted.
type ReceiptExport struct {
	// Dir is the directory the records go to.
	Dir string
	// Reader reads the receipt and its evidence parts whole (the API server, not the cache, which
	// holds receipts without their evidence).
	Reader client.Reader
}

// export writes rc's record, replacing a file of its name only with the same content (a receipt's
// name is its content's digest), and makes it durable before it returns.
func (e *ReceiptExport) export(ctx context.Context, key client.ObjectKey) error {
	full := &v1alpha1.GateReceipt{}
	if err := e.Reader.Get(ctx, key, full); err != nil {
		return fmt.Errorf("reading gate receipt %s to export it before pruning: %w", key, err)
	}
	br, err := ops.BundleReceiptOf(ctx, e.Reader, full)
	if err != nil {
		return fmt.Errorf("reading the evidence of gate receipt %s to export it before pruning: %w", key, err)
	}
	b, err := json.MarshalIndent(br, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Join(e.Dir, full.Namespace, full.Spec.Rollout)
	if err := writeDurably(dir, full.Name+".json", b); err != nil {
		return fmt.Errorf("exporting gate receipt %s before pruning it (--records-export-dir): %w", key, err)
	}
	return nil
}

// writeDurably writes name in dir (made if missing) through a temporary file synced and renamed
// into place, then syncs dir: once it returns, the file is whole and survives a crash.
func writeDurably(dir, name string, b []byte) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+name+".*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := tmp.Write(b); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, name)); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
