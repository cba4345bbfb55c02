package registries

import "github.com/meshfed/meshfed/debounce"

// Debouncer is debounce.Debouncer, meshfed's one debounce helper, under
// the name registries and the aggregator use.
type Debouncer = debounce.Debouncer
