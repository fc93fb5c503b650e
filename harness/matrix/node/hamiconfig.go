package node

import (
	"bytes"
	"fmt"
	"text/template"
)

// hamiDeviceConfig renders device-config.yaml as HAMi's chart renders its device ConfigMap (key
// device-config.yaml of <release>-device): every vendor section with the chart's defaults, the
// nvidia section complete, with the node's split count. limitDelivery and
// allowPodLimitDeliveryOverride are limitbed's additions; HAMi's plugin ignores them.
// TestHAMiDeviceConfigMatchesChart compares it with the chart's rendering in
// ../shared/fixtures/hami/device-config.yaml.
func hamiDeviceConfig(c hamiConfigValues) ([]byte, error) {
	var out bytes.Buffer
	if err := hamiConfigTemplate.Execute(&out, c); err != nil {
		return nil, fmt.Errorf("node: render device-config.yaml: %w", err)
	}
	return out.Bytes(), nil
}

type hamiConfigValues struct {
	Resource      string
	SplitCount    uint
	LimitDelivery string // "" leaves it out
	AllowPodEnv   bool
}

var hamiConfigTemplate = template.Must(template.New("device-config.yaml").Parse(`nvidia:
  resourceCountName: {{.Resource}}
  resourceMemoryName: nvidia.com/gpumem
  resourceMemoryPercentageName: nvidia.com/gpumem-percentage
  resourceCoreName: nvidia.com/gpucores
  resourcePriorityName: nvidia.com/priority
  overwriteEnv: false
  defaultMemory: 0
  defaultCores: 0
  defaultGPUNum: 1
  preConfiguredDeviceMemory: 0
  memoryFactor: 1
  deviceSplitCount: {{.SplitCount}}
  deviceMemoryScaling: 1
  deviceCoreScaling: 1
  enableNumaTopology: false
  gpuCorePolicy: default
  libCudaLogLevel: 1
  runtimeClassName: ""
{{- if .LimitDelivery}}
  limitDelivery: {{.LimitDelivery}}
{{- end}}
{{- if .AllowPodEnv}}
  allowPodLimitDeliveryOverride: true
{{- end}}
  migProfileAllowlist:
  - models: [ "A30" ]
    profiles: [ "1g.6gb", "2g.12gb", "4g.24gb" ]
  - models: [ "A100-SXM4-40GB", "A100-40GB-PCIe", "A100-PCIE-40GB"]
    profiles: [ "1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb" ]
cambricon:
  resourceCountName: cambricon.com/vmlu
  resourceMemoryName: cambricon.com/mlu.smlu.vmemory
  resourceCoreName: cambricon.com/mlu.smlu.vcore
hygon:
  resourceCountName: hygon.com/dcunum
  resourceMemoryName: hygon.com/dcumem
  resourceCoreName: hygon.com/dcucores
  memoryFactor: 1
`))
