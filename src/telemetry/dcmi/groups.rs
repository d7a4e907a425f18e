//! The reading groups of the DCMI source: inventory, health and faults, sensors and card
//! power, utilisation, memory and processes, network.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Instant;

use super::{DcmiSource, Got, Invalid, Reading, convert, ffi};
use crate::snapshot::npu::{
    self as model, ChipAddress, ChipKind, ChipReadings, Ddr, Ecc, Fault, FaultLevel, FaultState,
    Fec, Hbm, Identity, LevelSource, NpuProcess, NpuState, PacketCounters, Scope, UtilUnit,
    network_health_bad,
};
use crate::telemetry::GroupReport;

/// Processes exported per chip, at most (the DCMI reference's own limit): the ones using
/// the most device memory when a driver lists more.
pub const MAX_PROCESSES: usize = 32;

impl DcmiSource {
    pub(super) fn inventory(&mut self, state: &mut NpuState) -> GroupReport {
        let mut errors = 0;
        state.driver_version = self
            .call("dcmi_get_dcmi_version", None, Scope::Call, |l| {
                l.dcmi_version()
            })
            .value(&mut errors);
        let cards = match self.call("dcmi_get_card_list", None, Scope::Call, |l| l.card_list()) {
            Got::Value(c) => c,
            _ => {
                // Keep the chips we know: a failed enumeration must not make devices
                // disappear (their faults would vanish with them).
                state.mark_enumeration_failed();
                return GroupReport { errors: errors + 1 };
            }
        };
        let old: HashMap<(i32, i32), ChipReadings> = state
            .chips
            .values()
            .map(|c| ((c.address.card, c.address.device), c.clone()))
            .collect();
        let mut chips = BTreeMap::new();
        for card in cards {
            let n = match self.call(
                "dcmi_get_device_num_in_card",
                None,
                Scope::Card(card),
                move |l| l.device_num_in_card(card),
            ) {
                Got::Value(n) => n.clamp(0, 16),
                _ => {
                    errors += 1;
                    for c in old.values().filter(|c| c.address.card == card) {
                        chips.insert(c.address.phy, c.clone());
                    }
                    continue;
                }
            };
            let serial = self
                .call(
                    "dcmi_get_card_elabel_v2",
                    None,
                    Scope::Card(card),
                    move |l| l.card_serial(card),
                )
                .value(&mut errors)
                .filter(|s| !s.is_empty());
            for device in 0..n {
                let addr = match self.enumerate(card, device) {
                    Some(a) => a,
                    None => {
                        errors += 1;
                        if let Some(c) = old.get(&(card, device)) {
                            chips.insert(c.address.phy, c.clone());
                        }
                        continue;
                    }
                };
                // Two chips claiming one physical id would overwrite each other's series:
                // name both, keep the first, count the error.
                if let Some(first) = chips.get(&addr.phy) {
                    let first: &ChipReadings = first;
                    let dup = convert::duplicate_physical_ids(&[
                        (first.address.logic, first.address.phy),
                        (addr.logic, addr.phy),
                    ]);
                    for d in dup {
                        tracing::error!(
                            phy_id = d.phy_id,
                            first_logic_id = d.first,
                            first_card = first.address.card,
                            first_device = first.address.device,
                            second_logic_id = d.second,
                            second_card = card,
                            second_device = device,
                            "two NPUs report the same physical id; the second is left out until the driver reports distinct ids"
                        );
                    }
                    errors += 1;
                    continue;
                }
                let mut chip = old.get(&(card, device)).cloned().unwrap_or_default();
                if chip.address != addr {
                    chip = ChipReadings::default();
                }
                chip.address = addr;
                let (identity, e) = self.identity(addr, serial.clone());
                chip.identity = identity;
                errors += e;
                chips.insert(addr.phy, chip);
            }
        }
        state.chips = chips;
        state.mark_enumerated();
        let cards: BTreeSet<i32> = state.chips.values().map(|c| c.address.card).collect();
        state.cards.retain(|card, _| cards.contains(card));
        GroupReport { errors }
    }

    fn enumerate(&mut self, card: i32, device: i32) -> Option<ChipAddress> {
        let logic = match self.call(
            "dcmi_get_device_logic_id",
            None,
            Scope::Card(card),
            move |l| l.logic_id(card, device),
        ) {
            Got::Value(v) => u32::try_from(v).ok()?,
            _ => return None,
        };
        let phy = match self.call(
            "dcmi_get_device_phyid_from_logicid",
            None,
            Scope::Card(card),
            move |l| l.phy_id_from_logic(logic),
        ) {
            Got::Value(v) => v,
            _ => return None,
        };
        Some(ChipAddress {
            card,
            device,
            logic,
            phy,
        })
    }

    fn identity(&mut self, a: ChipAddress, serial: Option<String>) -> (Identity, u32) {
        let (card, dev, phy) = (a.card, a.device, Scope::Chip(a.phy));
        let mut errors = 0;
        let mut id = Identity {
            serial,
            ..Identity::default()
        };
        let info = match self.call("dcmi_get_device_chip_info_v2", None, phy, move |l| {
            l.chip_info_v2(card, dev)
        }) {
            Got::Unsupported => self.call("dcmi_get_device_chip_info", None, phy, move |l| {
                l.chip_info(card, dev)
            }),
            got => got,
        };
        let info = info.value(&mut errors);
        id.model = info
            .as_ref()
            .map(|i| format!("{}-{}-{}", i.chip_name, i.chip_type, i.chip_ver));
        let chip_name = info.map(|i| i.chip_name).unwrap_or_default();
        // MindCluster tells A3 by board id; the chip name (910_93xx, 310Px, 910Bx) decides
        // without the extra call on every product hcclwatch knows.
        let board_id = match model::kind_from_chip_name(&chip_name) {
            Some(_) => None,
            None => self.read(
                phy,
                &mut errors,
                ("dcmi_get_device_board_info", None),
                move |l| l.board_id(card, dev),
                Ok,
            ),
        };
        id.kind = model::chip_kind(&chip_name, board_id);
        id.pci_bus_id = self.read(
            Scope::Chip(a.phy),
            &mut errors,
            ("dcmi_get_device_pcie_info_v2", None),
            move |l| l.pcie_info_v2(card, dev),
            |p| Ok(model::format_bdf(p.domain, p.bus, p.device, p.function)),
        );
        id.uuid = self.read(
            Scope::Chip(a.phy),
            &mut errors,
            ("dcmi_get_device_die_v2", Some(1)),
            move |l| l.die_v2(card, dev, 1),
            |w| Ok(model::format_vdie(w)),
        );
        (id, errors)
    }

    /// Health, fault codes and network health of one chip; returns its errors.
    pub(super) fn health(&mut self, chip: &mut ChipReadings) -> u32 {
        let (card, dev, phy) = (chip.address.card, chip.address.device, chip.address.phy);
        chip.network_health = None;
        let (mut errors, dropped) = self.health_and_faults(chip);
        if dropped {
            // Network health is known to block after a card drops; do not ask.
            count_bad_reads(chip);
            return errors;
        }
        chip.network_health = self.read(
            Scope::Chip(phy),
            &mut errors,
            ("dcmi_get_device_network_health", None),
            move |l| l.network_health(card, dev),
            |v| match u32::try_from(v) {
                Ok(v) if v <= 0xFF => Ok(v),
                _ => Err(Invalid::Result(v)),
            },
        );
        count_bad_reads(chip);
        errors
    }

    /// Health and active fault codes of one chip, each code with its level and text; what
    /// a fault event re-reads at once. Returns the errors and whether the card dropped.
    pub(super) fn health_and_faults(&mut self, chip: &mut ChipReadings) -> (u32, bool) {
        let (card, dev, phy) = (chip.address.card, chip.address.device, chip.address.phy);
        let at = Scope::Chip(phy);
        let mut errors = 0;
        let mut dropped = false;
        chip.health = None;
        chip.up = None;
        chip.faults = None;
        match self.call("dcmi_get_device_health", None, at, move |l| {
            l.health(card, dev)
        }) {
            Got::Value(0xFFFF_FFFF) => {
                dropped = true;
                chip.up = Some(false);
            }
            Got::Value(h) if h <= 3 => {
                self.valid_again(Reading::of("dcmi_get_device_health", None, at));
                chip.health = Some(h);
                chip.up = Some(true);
            }
            Got::Value(h) => {
                self.count_invalid(
                    Reading::of("dcmi_get_device_health", None, at),
                    Invalid::Health(h),
                );
                chip.up = Some(true);
                errors += 1;
            }
            Got::Dropped => {
                dropped = true;
                chip.up = Some(false);
                errors += 1;
            }
            Got::Failed | Got::NoAnswer => {
                chip.up = Some(false);
                errors += 1;
            }
            Got::Unsupported => {}
        }
        let mut codes = match self.call("dcmi_get_device_errorcode_v2", None, at, move |l| {
            l.error_codes_v2(card, dev)
        }) {
            Got::Value(codes) => Some(codes),
            Got::Dropped => {
                dropped = true;
                errors += 1;
                None
            }
            Got::Failed | Got::NoAnswer => {
                errors += 1;
                None
            }
            Got::Unsupported => None,
        };
        chip.dropped = dropped;
        if dropped {
            let codes = codes.get_or_insert_with(Vec::new);
            if !codes.contains(&model::FAULT_CARD_DROPPED) {
                codes.push(model::FAULT_CARD_DROPPED);
            }
        }
        if let Some(codes) = codes {
            let (faults, e) = self.faults(chip.address, codes, dropped);
            chip.faults = Some(faults);
            errors += e;
        }
        (errors, dropped)
    }

    /// Each code with its level (from the file's override, else the table, else its event's
    /// severity) and its text (asked once per code; not on a dropped card), then through
    /// the file's `consecutive_reads` and `clear_after`
    /// ([`crate::telemetry::fault_overrides::FaultDebounce`]). Returns the faults and
    /// errors.
    fn faults(&mut self, a: ChipAddress, codes: Vec<u32>, dropped: bool) -> (Vec<Fault>, u32) {
        let table = self.opts.fault_table.get();
        let mut errors = 0;
        let mut out = Vec::with_capacity(codes.len());
        for code in codes {
            let (level, source) = match (table.override_level(code), table.listed_level(code)) {
                (Some(l), _) => (l, LevelSource::Override),
                (None, Some(l)) => (l, LevelSource::Table),
                (None, None) => {
                    let severity = self.event_severity.get(&code).copied();
                    let source = match severity {
                        Some(_) => LevelSource::Severity,
                        None => LevelSource::Default,
                    };
                    let level = FaultLevel::from_severity(severity);
                    if self
                        .logged
                        .insert(format!("unlisted/{code}/{}", level.as_str()))
                    {
                        tracing::warn!(
                            code = %format!("0x{code:08X}"),
                            level = level.as_str(),
                            table = table.origin(),
                            "fault code not in the fault-level table; level from its event severity (hint or minor: NotHandleFault; otherwise or unknown: SeparateNPU), as MindCluster's device plugin does"
                        );
                    }
                    (level, source)
                }
            };
            let description = if dropped {
                self.descriptions.get(&code).cloned().flatten()
            } else {
                self.describe(a, code, &mut errors)
            };
            out.push(Fault {
                code,
                level,
                source,
                description,
                state: FaultState::Counted,
            });
        }
        let out = self
            .debounce
            .apply(a.phy, out, table.overrides(), Instant::now());
        (out, errors)
    }

    /// DCMI's text for `code`, asked of chip `a` the first time the code is seen.
    ///
    /// The text is a property of the code, so `-8255` here means "no text for this code"
    /// and is remembered per code, not as the chip refusing the call: one unknown code must
    /// not cost every other code its text. A missing symbol is unsupported as usual.
    fn describe(&mut self, a: ChipAddress, code: u32, errors: &mut u32) -> Option<String> {
        if let Some(d) = self.descriptions.get(&code) {
            return d.clone();
        }
        let (card, dev) = (a.card, a.device);
        let got = self.call(super::CODE_TEXT, None, Scope::Chip(a.phy), move |l| {
            l.error_string(card, dev, code)
        });
        let text = match got {
            Got::Value(s) => clean_description(&s),
            // -8255: no text for this code (`call` does not mark the chip for it); or the
            // symbol is missing, and the next code finds that out without a call.
            Got::Unsupported => None,
            // An error code for this code: remembered, so it is not asked every cycle.
            Got::Failed => {
                *errors += 1;
                None
            }
            // No answer this time (or a dropped card): ask again next time.
            Got::Dropped | Got::NoAnswer => {
                *errors += 1;
                return None;
            }
        };
        if self.descriptions.len() >= 4096 {
            self.descriptions.clear();
        }
        self.descriptions.insert(code, text.clone());
        text
    }

    /// Temperature, power, voltage and AI-core clock of one chip; returns its errors.
    pub(super) fn sensors(&mut self, chip: &mut ChipReadings) -> u32 {
        let (card, dev, phy) = (chip.address.card, chip.address.device, chip.address.phy);
        let mut errors = 0;
        chip.temperature_celsius = self.read(
            Scope::Chip(phy),
            &mut errors,
            ("dcmi_get_device_temperature", None),
            move |l| l.temperature(card, dev),
            |t| convert::checked_temperature(t).map_err(Invalid::from),
        );
        // On 310P the power is the card's, from the MCU ([`Self::card_power`]); chip power
        // is not supported there (npu-smi prints NA).
        chip.power_watts = if chip.identity.kind == ChipKind::Ascend310P {
            None
        } else {
            self.read(
                Scope::Chip(phy),
                &mut errors,
                ("dcmi_get_device_power_info", None),
                move |l| l.power(card, dev),
                |dw| convert::checked_power(dw).map_err(Invalid::from),
            )
        };
        chip.voltage_volts = self.read(
            Scope::Chip(phy),
            &mut errors,
            ("dcmi_get_device_voltage", None),
            move |l| l.voltage(card, dev),
            |cv| convert::checked_voltage(cv).map_err(Invalid::from),
        );
        chip.aicore_frequency_hertz = self.read(
            Scope::Chip(phy),
            &mut errors,
            ("dcmi_get_device_frequency", Some(7)),
            move |l| l.frequency(card, dev, 7),
            |mhz| convert::checked_clock(mhz).map_err(Invalid::from),
        );
        errors
    }

    /// Utilisation of one chip by unit; returns its errors.
    pub(super) fn utilization(&mut self, chip: &mut ChipReadings) -> u32 {
        const TYPES: [(i32, UtilUnit); 4] = [
            (2, UtilUnit::Aicore),
            (6, UtilUnit::Hbm),
            (12, UtilUnit::Vector),
            (13, UtilUnit::Overall),
        ];
        let (card, dev, phy) = (chip.address.card, chip.address.device, chip.address.phy);
        let mut errors = 0;
        chip.utilization.clear();
        for (t, unit) in TYPES {
            if let Some(r) = self.read(
                Scope::Chip(phy),
                &mut errors,
                ("dcmi_get_device_utilization_rate", Some(t)),
                move |l| l.utilization_rate(card, dev, t),
                |pct| {
                    convert::percent_to_ratio(pct).ok_or(Invalid::Percent {
                        kind: t,
                        percent: pct,
                    })
                },
            ) {
                chip.utilization.insert(unit, r);
            }
        }
        let wanted = [
            UtilUnit::Aicore,
            UtilUnit::Vector,
            UtilUnit::Overall,
            UtilUnit::Cube,
        ];
        if wanted.iter().all(|u| chip.utilization.contains_key(u)) {
            return errors;
        }
        let multi = self.call(
            "dcmi_get_device_multi_utilization_rate",
            None,
            Scope::Chip(phy),
            move |l| l.multi_utilization(card, dev),
        );
        if let Some(m) = multi.value(&mut errors) {
            for (unit, pct) in [
                (UtilUnit::Aicore, m.aicore),
                (UtilUnit::Vector, m.aiv),
                (UtilUnit::Overall, m.npu),
                (UtilUnit::Cube, m.aic),
            ] {
                // A field above 100 is DCMI's "not available" for that unit.
                if let Some(r) = convert::percent_to_ratio(pct) {
                    chip.utilization.entry(unit).or_insert(r);
                }
            }
        }
        errors
    }

    /// HBM, DDR, ECC and the processes of one chip; returns its errors.
    pub(super) fn memory(&mut self, chip: &mut ChipReadings) -> u32 {
        let (card, dev, phy) = (chip.address.card, chip.address.device, chip.address.phy);
        let mut errors = 0;
        chip.hbm = self.read(
            Scope::Chip(phy),
            &mut errors,
            ("dcmi_get_device_hbm_info", None),
            move |l| l.hbm_info(card, dev),
            |h| {
                let total = convert::mb_to_bytes(h.memory_size_mb);
                let used = convert::mb_to_bytes(h.memory_usage_mb);
                let temp = convert::checked_temperature(h.temp_c).ok();
                let bw = convert::percent_to_ratio(h.bandwidth_util_pct);
                match (total, used, temp, bw) {
                    (Some(total_bytes), Some(used_bytes), Some(t), Some(b))
                        if used_bytes <= total_bytes =>
                    {
                        Ok(Hbm {
                            total_bytes,
                            used_bytes,
                            temperature_celsius: t,
                            bandwidth_utilization_ratio: b,
                        })
                    }
                    _ => Err(Invalid::Hbm(h)),
                }
            },
        );
        chip.ddr = self.read(
            Scope::Chip(phy),
            &mut errors,
            ("dcmi_get_device_memory_info_v3", None),
            move |l| l.memory_info_v3(card, dev),
            |d| match (
                convert::mb_to_bytes(d.memory_size_mb),
                convert::mb_to_bytes(d.memory_available_mb),
            ) {
                (Some(total), Some(avail)) if avail <= total => Ok(Ddr {
                    total_bytes: total,
                    used_bytes: total - avail,
                }),
                _ => Err(Invalid::Ddr(d)),
            },
        );
        chip.ecc = self.read(
            Scope::Chip(phy),
            &mut errors,
            ("dcmi_get_device_ecc_info", Some(2)),
            move |l| l.ecc_info(card, dev, 2),
            |e| {
                Ok(Ecc {
                    enabled: e.enable_flag != 0,
                    single: e.single.into(),
                    double: e.double.into(),
                    total_single: e.total_single.into(),
                    total_double: e.total_double.into(),
                    single_isolated_pages: e.single_isolated_pages.into(),
                    double_isolated_pages: e.double_isolated_pages.into(),
                })
            },
        );
        chip.processes = self.read(
            Scope::Chip(phy),
            &mut errors,
            ("dcmi_get_device_resource_info", None),
            move |l| l.processes(card, dev),
            |list| Ok(top_processes(list)),
        );
        errors
    }

    /// Packet counters, FEC counters and HCCS links of one chip; returns its errors.
    pub(super) fn network(&mut self, chip: &mut ChipReadings) -> u32 {
        let profiling_ms = i32::try_from(self.opts.hccs_profiling_time.as_millis())
            .unwrap_or(200)
            .clamp(1, 1000);
        let (card, dev, phy) = (chip.address.card, chip.address.device, chip.address.phy);
        let mut errors = 0;
        chip.hccs = model::Hccs::default();
        chip.packets = self.read(
            Scope::Chip(phy),
            &mut errors,
            ("dcmi_get_netdev_pkt_stats_info", None),
            move |l| l.netdev_pkt_stats(card, dev, 0),
            |c| Ok(packet_counters(&c)),
        );
        chip.fec = self.read(
            Scope::Chip(phy),
            &mut errors,
            ("dcmi_get_extra_statistics_info", None),
            move |l| l.extra_statistics(card, dev, 0),
            |x| {
                let r = x.correcting_bit_rate;
                Ok(Fec {
                    total: x.total,
                    corrected: x.corrected,
                    uncorrectable: x.uncorrectable,
                    bad: x.bad,
                    // Its unit is not documented; only a value that can be a ratio is kept.
                    pre_correction_ber: (r.is_finite() && (0.0..=1.0).contains(&r)).then_some(r),
                })
            },
        );
        let bandwidth = self.read(
            Scope::Chip(phy),
            &mut errors,
            ("dcmi_get_hccs_link_bandwidth_info", None),
            move |l| l.hccs_bandwidth(card, dev, profiling_ms),
            |bw| {
                Ok((
                    convert::hccs_links_bytes_per_second(&bw.tx),
                    convert::hccs_links_bytes_per_second(&bw.rx),
                ))
            },
        );
        if let Some((tx, rx)) = bandwidth {
            // One bad link does not hide the chip's other links: it is counted and its
            // slot is empty.
            let bad = tx.iter().chain(&rx).filter(|v| v.is_none()).count();
            let links = Reading::of("dcmi_get_hccs_link_bandwidth_info", None, Scope::Chip(phy))
                .part("links");
            if bad > 0 {
                self.count_invalid(links, Invalid::Links(bad));
                errors += 1;
            } else {
                self.valid_again(links);
            }
            chip.hccs.tx_bytes_per_second = tx.try_into().ok();
            chip.hccs.rx_bytes_per_second = rx.try_into().ok();
        }
        // npu-exporter probes sub-command 5 (64-bit) and falls back to 3 (32-bit).
        let stats = match self.call(
            "dcmi_get_device_info",
            Some(5),
            Scope::Chip(phy),
            move |l| l.hccs_statistics_u64(card, dev),
        ) {
            Got::Unsupported => self.call(
                "dcmi_get_device_info",
                Some(3),
                Scope::Chip(phy),
                move |l| l.hccs_statistics_u32(card, dev),
            ),
            got => got,
        };
        if let Some(s) = stats.value(&mut errors) {
            chip.hccs.tx_flits = Some(s.tx);
            chip.hccs.rx_flits = Some(s.rx);
            chip.hccs.crc_errors = Some(s.crc_errors);
        }
        errors
    }

    /// Card-level power after the chips' sensors: on A3 the power two dies report alike is
    /// kept once, on die 0; on 310P cards the MCU's board power is read once per card.
    /// Returns the errors.
    pub(super) fn card_power(&mut self, state: &mut NpuState) -> u32 {
        dedupe_card_power(&mut state.chips);
        let mcu_cards: BTreeSet<i32> = state
            .chips
            .values()
            .filter(|c| c.identity.kind == ChipKind::Ascend310P)
            .map(|c| c.address.card)
            .collect();
        let mut errors = 0;
        for card in state
            .chips
            .values()
            .map(|c| c.address.card)
            .collect::<BTreeSet<_>>()
        {
            let power = if mcu_cards.contains(&card) {
                self.read(
                    Scope::Card(card),
                    &mut errors,
                    ("dcmi_mcu_get_power_info", None),
                    move |l| l.mcu_power(card),
                    |dw| convert::mcu_power_watts(dw).ok_or(Invalid::McuPower(dw)),
                )
            } else {
                None
            };
            match power {
                Some(w) => state.cards.entry(card).or_default().power_watts = Some(w),
                None => {
                    state.cards.remove(&card);
                }
            }
        }
        errors
    }
}

/// Picks the counters hcclwatch exports out of DCMI's 48, by header position.
fn packet_counters(c: &[u64; ffi::PKT_STATS_COUNTERS]) -> PacketCounters {
    PacketCounters {
        mac_tx_pause: c[0],
        mac_rx_pause: c[1],
        mac_tx_pfc: c[2],
        mac_rx_pfc: c[11],
        mac_tx_bad: c[22],
        mac_rx_bad: c[26],
        mac_rx_fcs_errors: c[28],
        roce_rx_all: c[30],
        roce_rx_err: c[31],
        roce_tx_all: c[33],
        roce_tx_err: c[34],
        roce_rx_cnp: c[36],
        roce_tx_cnp: c[37],
        roce_retry: c[42],
        roce_ecn: c[43],
    }
}

/// At most [`MAX_PROCESSES`] processes, the largest users first, with positive PIDs.
fn top_processes(list: Vec<ffi::ProcMem>) -> Vec<NpuProcess> {
    let mut out: Vec<NpuProcess> = list
        .into_iter()
        .filter_map(|p| {
            Some(NpuProcess {
                pid: u32::try_from(p.pid).ok().filter(|pid| *pid > 0)?,
                memory_bytes: p.memory_bytes,
            })
        })
        .collect();
    out.sort_by(|a, b| b.memory_bytes.cmp(&a.memory_bytes).then(a.pid.cmp(&b.pid)));
    out.truncate(MAX_PROCESSES);
    out
}

/// A3 power is a card reading (npu-smi shows it on die 0 only). Where both dies of an A3
/// card report the same value, the value is the card's, read twice: keep it on the die
/// with the lowest device id. Differing values are left alone (they may be per-die
/// readings), and a die that reports nothing leaves the other's value where it is.
fn dedupe_card_power(chips: &mut BTreeMap<u32, ChipReadings>) {
    let mut by_card: HashMap<i32, Vec<(i32, u32, f64)>> = HashMap::new();
    for c in chips.values() {
        if let (ChipKind::Ascend910A3, Some(p)) = (c.identity.kind, c.power_watts) {
            by_card
                .entry(c.address.card)
                .or_default()
                .push((c.address.device, c.address.phy, p));
        }
    }
    for mut dies in by_card.into_values() {
        dies.sort_by_key(|(device, _, _)| *device);
        let same = dies.windows(2).all(|w| w[0].2 == w[1].2);
        if dies.len() >= 2 && same {
            for (_, phy, _) in &dies[1..] {
                if let Some(c) = chips.get_mut(phy) {
                    c.power_watts = None;
                }
            }
        }
    }
}

/// A fault text as a label value: control characters become spaces, runs of whitespace
/// one space; an empty text is none.
fn clean_description(s: &str) -> Option<String> {
    let cleaned = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect::<String>()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    (!cleaned.is_empty()).then_some(cleaned)
}

/// Counts this periodic read into the chip's streaks of bad reads (a read that failed
/// breaks a streak: no reading is not a bad reading).
fn count_bad_reads(chip: &mut ChipReadings) {
    chip.critical_reads = if chip.health == Some(3) {
        chip.critical_reads.saturating_add(1)
    } else {
        0
    };
    chip.network_bad_reads = if chip.network_health.is_some_and(network_health_bad) {
        chip.network_bad_reads.saturating_add(1)
    } else {
        0
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Streaks count periodic reads: three critical reads make 3, a good or failed read
    /// ends the streak; network health 6 (port not in use) is not bad.
    #[test]
    fn bad_reads_are_counted_in_a_row() {
        let mut c = ChipReadings::default();
        for (health, net, want) in [
            (Some(3), Some(3), (1, 1)),
            (Some(3), Some(3), (2, 2)),
            (Some(3), Some(6), (3, 0)),
            (None, Some(1), (0, 1)),
            (Some(3), None, (1, 0)),
        ] {
            c.health = health;
            c.network_health = net;
            count_bad_reads(&mut c);
            assert_eq!((c.critical_reads, c.network_bad_reads), want);
        }
    }

    #[test]
    fn packet_counter_positions() {
        let mut c = [0u64; ffi::PKT_STATS_COUNTERS];
        for (i, v) in c.iter_mut().enumerate() {
            *v = i as u64 + 1000;
        }
        let p = packet_counters(&c);
        assert_eq!(p.mac_tx_pause, 1000);
        assert_eq!(p.mac_rx_pfc, 1011);
        assert_eq!(p.mac_rx_fcs_errors, 1028);
        assert_eq!(p.roce_rx_err, 1031);
        assert_eq!(p.roce_ecn, 1043);
    }

    fn die(card: i32, device: i32, kind: ChipKind, power: Option<f64>) -> ChipReadings {
        let mut c = ChipReadings::default();
        c.address.card = card;
        c.address.device = device;
        c.address.phy = (card * 2 + device) as u32;
        c.identity.kind = kind;
        c.power_watts = power;
        c
    }

    fn powers(chips: &BTreeMap<u32, ChipReadings>) -> Vec<Option<f64>> {
        chips.values().map(|c| c.power_watts).collect()
    }

    #[test]
    fn a3_card_power_is_kept_once() {
        let a3 = ChipKind::Ascend910A3;
        let mut chips: BTreeMap<u32, ChipReadings> = [
            die(0, 0, a3, Some(166.5)),
            die(0, 1, a3, Some(166.5)), // the card's value again: dropped
            die(1, 0, a3, Some(170.0)),
            die(1, 1, a3, None), // die 1 refuses: die 0 keeps its value
            die(2, 0, a3, None),
            die(2, 1, a3, Some(150.0)), // die 0 refuses: die 1 keeps its value
            die(3, 0, a3, Some(80.0)),
            die(3, 1, a3, Some(81.0)), // different: per-die readings, both kept
        ]
        .into_iter()
        .map(|c| (c.address.phy, c))
        .collect();
        dedupe_card_power(&mut chips);
        assert_eq!(
            powers(&chips),
            [
                Some(166.5),
                None,
                Some(170.0),
                None,
                None,
                Some(150.0),
                Some(80.0),
                Some(81.0)
            ]
        );
    }

    #[test]
    fn equal_power_on_other_products_is_left_alone() {
        let mut chips: BTreeMap<u32, ChipReadings> = [
            die(0, 0, ChipKind::Other, Some(200.0)),
            die(0, 1, ChipKind::Other, Some(200.0)),
        ]
        .into_iter()
        .map(|c| (c.address.phy, c))
        .collect();
        dedupe_card_power(&mut chips);
        assert_eq!(powers(&chips), [Some(200.0), Some(200.0)]);
    }

    #[test]
    fn processes_are_bounded_largest_first() {
        let list: Vec<ffi::ProcMem> = (0..40)
            .map(|i| ffi::ProcMem {
                pid: 1000 + i,
                memory_bytes: (i as u64) << 20,
            })
            .chain([ffi::ProcMem {
                pid: -1,
                memory_bytes: 1 << 40,
            }])
            .collect();
        let top = top_processes(list);
        assert_eq!(top.len(), 32);
        assert_eq!(top[0].pid, 1039);
        assert_eq!(top[31].pid, 1008);
        assert!(top.iter().all(|p| p.pid >= 1000), "negative PIDs dropped");
    }

    #[test]
    fn descriptions_are_label_safe() {
        assert_eq!(
            clean_description("  HBM\tmulti-bit\r\n error \u{0}x ").as_deref(),
            Some("HBM multi-bit error x")
        );
        assert_eq!(clean_description(" \n "), None);
    }
}
