// The newest Grafana release checked (see package.json): its schema under the names that
// dashboard.ts uses.
export type * as raw from '@grafana/schema/dist/esm/raw/dashboard/x/Dashboard_types.gen';
export type * as bargauge from '@grafana/schema/dist/esm/raw/composable/bargauge/panelcfg/x/BarGaugePanelCfg_types.gen';
export type * as gauge from '@grafana/schema/dist/esm/raw/composable/gauge/panelcfg/x/GaugePanelCfg_types.gen';
export type * as stat from '@grafana/schema/dist/esm/raw/composable/stat/panelcfg/x/StatPanelCfg_types.gen';
export type * as statetimeline from '@grafana/schema/dist/esm/raw/composable/statetimeline/panelcfg/x/StateTimelinePanelCfg_types.gen';
export type * as table from '@grafana/schema/dist/esm/raw/composable/table/panelcfg/x/TablePanelCfg_types.gen';
export type * as timeseries from '@grafana/schema/dist/esm/raw/composable/timeseries/panelcfg/x/TimeSeriesPanelCfg_types.gen';

import type { Dataquery } from '@grafana/grafana-foundation-sdk/prometheus';

// @grafana/schema no longer ships the Prometheus query's schema; the foundation SDK's type is
// generated from Grafana's. Its marker method is no JSON key.
export type PrometheusQuery = Omit<Dataquery, '_implementsDataqueryVariant'>;
