package main

import _ "embed" // the chart's own files

// The chart's files that no object of config/default gives, copied as
// they are: its install notes, its README and the schema of its values
// (helm install, upgrade, template and lint refuse a value it does not
// allow, naming it). TestChartDocumentsValues keeps the README and the
// schema in step with values.yaml.
var (
	//go:embed files/NOTES.txt
	notesTXT string
	//go:embed files/README.md
	chartREADME string
	//go:embed files/values.schema.json
	valuesSchema string
)
