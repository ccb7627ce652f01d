package job

import "fmt"

// Limits bound every part of a job request. A shared cluster is used by hundreds of people:
// without bounds one careless or hostile document (10,000 port mappings, a 900 KB command,
// a million GPUs) is accepted, stored and shipped to a slave, where it can take Docker down.
// Every limit is checked when a job is parsed, and reported as a problem naming the field.
// Zero fields take the values of DefaultLimits.
type Limits struct {
	// DocumentBytes bounds the submitted document (API body, form field, job file).
	DocumentBytes int
	// GPUs, CPUs, MemoryGb and TmpfsGb bound the resources one job may ask for. The master
	// also refuses a job asking for more than its largest slave holds.
	GPUs, CPUs, MemoryGb, TmpfsGb int
	// NameBytes, DescriptionBytes, ImageBytes bound those strings.
	NameBytes, DescriptionBytes, ImageBytes int
	// CommandBytes bounds the command (text, or all words together); CommandWords its words.
	CommandBytes, CommandWords int
	// EnvVars bounds the number of environment variables, EnvNameBytes and EnvValueBytes each.
	EnvVars, EnvNameBytes, EnvValueBytes int
	// PortMappings bounds the published ports: Docker starts a proxy process per port.
	PortMappings int
	// HostPortMin and HostPortMax bound the host ports a job may ask for: the range the
	// slaves keep free for jobs (never 22 or the master's own ports).
	HostPortMin, HostPortMax int
	// Storage bounds the storage entries (bind mounts and RAM disks).
	Storage int
	// StringBytes bounds any other string of the document; ListItems any list.
	StringBytes, ListItems int
}

// Default limits. The slave checks the same port bounds (DefaultMaxPortMappings and the host
// port range): keep both sides equal.
const (
	DefaultMaxPortMappings = 16
	DefaultHostPortMin     = 30000
	DefaultHostPortMax     = 32767
)

// DefaultLimits are generous for real jobs and small enough that no document can hurt a slave
// or the master.
func DefaultLimits() Limits {
	return Limits{
		DocumentBytes:    1 << 20,
		GPUs:             16,
		CPUs:             512,
		MemoryGb:         4096,
		TmpfsGb:          1024,
		NameBytes:        256,
		DescriptionBytes: 4 << 10,
		ImageBytes:       2 << 10,
		CommandBytes:     16 << 10,
		CommandWords:     1024,
		EnvVars:          256,
		EnvNameBytes:     256,
		EnvValueBytes:    32 << 10,
		PortMappings:     DefaultMaxPortMappings,
		HostPortMin:      DefaultHostPortMin,
		HostPortMax:      DefaultHostPortMax,
		Storage:          32,
		StringBytes:      64 << 10,
		ListItems:        1024,
	}
}

// ClientLimits are for a client's local checks (the CLI converting a version 1 file offline):
// the fixed limits of DefaultLimits, with every limit an operator may change (resources,
// counts, the host port range) opened wide. The master, which knows its configuration, decides
// those; a client must not refuse what the master would accept.
func ClientLimits() Limits {
	l := DefaultLimits()
	const wide = 1 << 30
	l.GPUs, l.CPUs, l.MemoryGb, l.TmpfsGb = wide, wide, wide, wide
	l.PortMappings, l.EnvVars, l.Storage = l.ListItems, wide, l.ListItems
	l.HostPortMin, l.HostPortMax = 1, 65535
	return l
}

// withDefaults fills every zero field from DefaultLimits.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	fill := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	fill(&l.DocumentBytes, d.DocumentBytes)
	fill(&l.GPUs, d.GPUs)
	fill(&l.CPUs, d.CPUs)
	fill(&l.MemoryGb, d.MemoryGb)
	fill(&l.TmpfsGb, d.TmpfsGb)
	fill(&l.NameBytes, d.NameBytes)
	fill(&l.DescriptionBytes, d.DescriptionBytes)
	fill(&l.ImageBytes, d.ImageBytes)
	fill(&l.CommandBytes, d.CommandBytes)
	fill(&l.CommandWords, d.CommandWords)
	fill(&l.EnvVars, d.EnvVars)
	fill(&l.EnvNameBytes, d.EnvNameBytes)
	fill(&l.EnvValueBytes, d.EnvValueBytes)
	fill(&l.PortMappings, d.PortMappings)
	if l.HostPortMin <= 0 || l.HostPortMax <= 0 {
		l.HostPortMin, l.HostPortMax = d.HostPortMin, d.HostPortMax
	}
	fill(&l.Storage, d.Storage)
	fill(&l.StringBytes, d.StringBytes)
	fill(&l.ListItems, d.ListItems)
	return l
}

// ParsePortRange reads a host port range "30000-32767".
func ParsePortRange(s string) (lo, hi int, err error) {
	if _, err := fmt.Sscanf(s, "%d-%d", &lo, &hi); err != nil {
		return 0, 0, fmt.Errorf("port range %q: want LOW-HIGH, e.g. 30000-32767", s)
	}
	if lo < 1 || hi > 65535 || lo > hi {
		return 0, 0, fmt.Errorf("port range %q: must be within 1-65535, lowest first", s)
	}
	return lo, hi, nil
}
