package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/opengpulab/gpulab/client"
)

type clustersOptions struct {
	short, all, raw, noLines bool
	clusterID                int
	hasCluster               bool
}

func (a *app) cmdClusters(args []string) error {
	var o clustersOptions
	fs := newFlagSet("clusters", "gpulab-cli clusters [options] [CLUSTER_ID]",
		"Show the clusters and their slaves (worker machines) with their resources; with\n"+
			"CLUSTER_ID only that cluster. In --short tables, XX/YY means XX free of YY in total.\n"+
			"Needs no certificate.")
	fs.Bool(&o.short, "s,short", "one table row per slave (cluster, version, host, free/total resources)")
	fs.Bool(&o.all, "a,all", "also show slaves that are offline")
	fs.Bool(&o.raw, "r,raw", "print the JSON the master sends")
	fs.Bool(&o.noLines, "n,no-lines", "(with --short) draw no lines between the columns")
	pos, err := a.parseCommand(fs, args)
	if err != nil {
		return err
	}
	switch len(pos) {
	case 0:
	case 1:
		o.clusterID, err = strconv.Atoi(pos[0])
		if err != nil {
			return usagef("cluster ID %q is not a number", pos[0])
		}
		o.hasCluster = true
	default:
		return usagef("clusters takes at most one cluster ID")
	}
	cl, err := a.client(false)
	if err != nil {
		return err
	}
	if o.raw {
		return a.rawClusters(cl, o)
	}
	clusters, err := cl.Clusters(a.ctx)
	if err != nil {
		return err
	}
	slaves, err := a.slavesOf(cl, clusters)
	if err != nil {
		return err
	}
	var shown []client.Slave
	for _, s := range slaves {
		if (o.hasCluster && s.ClusterID != o.clusterID) || (!o.all && !s.IsOnline()) {
			continue
		}
		shown = append(shown, s)
	}
	if o.short {
		slaveTable(shown).render(a.stdout, !o.noLines)
		return nil
	}
	a.printClusters(clusters, shown, o)
	return nil
}

// slavesOf returns all slaves in cluster order. When the clusters carry no slaves (a master
// that lists them only under `GET slaves`), it asks for those.
func (a *app) slavesOf(cl *client.Client, clusters []client.Cluster) ([]client.Slave, error) {
	var out []client.Slave
	for _, c := range clusters {
		for _, s := range c.Slaves {
			if s.ClusterID == 0 {
				s.ClusterID = c.ID
			}
			out = append(out, s)
		}
	}
	if len(out) > 0 {
		return out, nil
	}
	slaves, err := cl.Slaves(a.ctx)
	if client.StatusCode(err) == http.StatusNotFound {
		return nil, nil
	}
	return slaves, err
}

func (a *app) rawClusters(cl *client.Client, o clustersOptions) error {
	raw, err := cl.ClustersRaw(a.ctx)
	if err != nil {
		return err
	}
	if !o.hasCluster {
		return a.writeJSON(raw)
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return fmt.Errorf("list clusters: decode answer: %w", err)
	}
	kept := []json.RawMessage{}
	for _, it := range items {
		var c struct {
			ID int `json:"id"`
		}
		if json.Unmarshal(it, &c) == nil && c.ID == o.clusterID {
			kept = append(kept, it)
		}
	}
	data, err := json.Marshal(kept)
	if err != nil {
		return fmt.Errorf("encode clusters: %w", err)
	}
	return a.writeJSON(data)
}

// slaveTable is the `clusters --short` table, column for column and width for width as in
// imec's documentation:
//
//	| Cluster | Version | Host                 | Workers | GPUs    | CPUs    | Memory (GB)     |
//	| 1       | stable  | gpu2                 |   2/2   |   2/2   |  16/16  |   31.18/31.18   |
func slaveTable(slaves []client.Slave) *table {
	t := &table{cols: []column{
		{title: "Cluster", min: 7},
		{title: "Version", min: 7},
		{title: "Host", min: 20},
		{title: "Workers", min: 7, align: alignCenter},
		{title: "GPUs", min: 7, align: alignCenter},
		{title: "CPUs", min: 7, align: alignCenter},
		{title: "Memory (GB)", min: 15, align: alignCenter},
	}}
	for _, s := range slaves {
		host := firstNonEmpty(s.Name, s.Host)
		if !s.IsOnline() {
			host += " (offline)"
		}
		gpus := freeTotal(s.GPUs, 0)
		if s.Fake {
			gpus += " (fake)"
		}
		t.add(strconv.Itoa(s.ClusterID), s.Version, host, freeTotal(s.Workers, 0), gpus,
			freeTotal(s.CPUs, 0), freeTotal(s.MemoryGb, 2))
	}
	return t
}

// freeTotal writes "free/total" with the given number of decimals.
func freeTotal(a client.Amount, decimals int) string {
	return strconv.FormatFloat(a.Free, 'f', decimals, 64) + "/" + strconv.FormatFloat(a.Total, 'f', decimals, 64)
}

// printClusters is the long form: each cluster with each of its slaves in detail, GPU models
// and CUDA version included.
func (a *app) printClusters(clusters []client.Cluster, slaves []client.Slave, o clustersOptions) {
	bySlaveCluster := map[int][]client.Slave{}
	for _, s := range slaves {
		bySlaveCluster[s.ClusterID] = append(bySlaveCluster[s.ClusterID], s)
	}
	known := map[int]bool{}
	var order []client.Cluster
	for _, c := range clusters {
		if o.hasCluster && c.ID != o.clusterID {
			continue
		}
		known[c.ID] = true
		order = append(order, c)
	}
	for _, s := range slaves {
		if !known[s.ClusterID] {
			known[s.ClusterID] = true
			order = append(order, client.Cluster{ID: s.ClusterID})
		}
	}
	if len(order) == 0 {
		if o.hasCluster {
			a.stderr.printf("There is no cluster %d.\n", o.clusterID)
		} else {
			a.stderr.printf("The master has no clusters yet.\n")
		}
		return
	}
	for i, c := range order {
		if i > 0 {
			a.stdout.printf("\n")
		}
		title := fmt.Sprintf("Cluster %d", c.ID)
		var notes []string
		if c.Name != "" {
			notes = append(notes, c.Name)
		}
		if c.Private {
			notes = append(notes, "private")
		}
		if len(notes) > 0 {
			title += " (" + strings.Join(notes, ", ") + ")"
		}
		a.stdout.printf("%s\n", title)
		list := bySlaveCluster[c.ID]
		if len(list) == 0 {
			a.stdout.printf("    no slaves online\n")
			continue
		}
		for j, s := range list {
			if j > 0 {
				a.stdout.printf("\n")
			}
			a.slaveDetail(s)
		}
	}
}

func (a *app) slaveDetail(s client.Slave) {
	k := &kvList{}
	k.add("Slave", dash(s.Name))
	if s.Host != "" && s.Host != s.Name {
		k.add("Host", s.Host)
	}
	k.add("Version", dash(s.Version))
	if s.IsOnline() {
		k.add("Status", "online")
	} else {
		k.add("Status", "offline")
	}
	k.add("Workers", freeTotal(s.Workers, 0)+" free")
	gpus := freeTotal(s.GPUs, 0) + " free"
	if s.Fake {
		gpus += " (fake GPUs, for demos and tests)"
	}
	k.add("GPUs", gpus)
	k.add("CPUs", freeTotal(s.CPUs, 0)+" free")
	k.add("Memory (GB)", freeTotal(s.MemoryGb, 2)+" free")
	models := dash(strings.Join(s.GPUModels, ", "))
	if s.Fake && len(s.GPUModels) > 0 {
		models += " (fake)"
	}
	k.add("GPU model", models)
	k.add("CUDA version", dash(s.CudaVersion))
	var b strings.Builder
	k.render(&printer{w: &b})
	for _, line := range strings.SplitAfter(b.String(), "\n") {
		if line != "" {
			a.stdout.printf("    %s", line)
		}
	}
}
